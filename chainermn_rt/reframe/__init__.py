"""ReFrame (``reframe-hpc==4.10.4``) for a site: its configuration from a profile, and checks
that run what a chainermn-rt job runs (docs/reframe.md).

- :mod:`.jobs`: a Plan as the fields of a ReFrame test (launcher options, executable,
  environment shell-quoted: ReFrame writes ``export K=V`` as given, and brace expansion would
  mangle JSON such as ``CHAINERMN_RT_SLOTS``);
- :mod:`.config`: the configuration (``chainermn-rt site reframe``);
- ``checks.py``: the checks, loaded by ReFrame's own Python (``reframe -c``), never imported
  here.
"""
