"""``chainermn-rt install``: the bundle laid out under a prefix for a site, with module files
(docs/install.md).

- :mod:`.layout`: where everything goes (one place for the paths);
- :mod:`.modulefiles`: the Lmod (Lua) and Environment Modules (Tcl) files' text;
- :mod:`.wrappers`: ``python3``/``python`` scripts that run the image's Python with the
  profile's binds, and ``chainermn-rt`` from the prefix's venv;
- :mod:`.installer`: the install itself, staged beside the prefix and renamed into place.
"""
