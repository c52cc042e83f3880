"""Values written into another program's language, quoted by that language's rules here and
nowhere else, or refused with a :class:`UserError` naming the field and what is allowed.

One function per language; every writer of a file another program reads or runs uses them:

- :func:`lua`: Lmod's module files (``install/modulefiles.py``);
- :func:`tcl`: Environment Modules' module files (``install/modulefiles.py``);
- :func:`python`: the ReFrame configuration ``site reframe`` writes (``reframe/config.py``);
- :func:`toml`, :func:`toml_key`: ``site init``'s profile, an install's ``site.toml``;
- :func:`sh`, :func:`sh_join`, :func:`sh_fill`, :func:`directive`: job scripts (render's
  filters ``sh``, ``shjoin``, ``shfill``, ``directive``), an install's wrappers, ReFrame's
  job fields; :class:`Expanding`, a word of an argv that holds the shell's own variables
  (``$PWD`` where the word runs), quoted by :func:`sh_word` and :func:`sh_join`;
- :func:`comment`: what any of them writes after ``#`` or ``--``;
- :func:`prometheus_label`: a label's value in Prometheus' text exposition (the timeline's
  metrics, ``timeline/metrics.py``);
- :func:`word`: a path in a file that splits its lines on blanks and has no quoting (Slurm's
  plugstack.conf, enroot's fstab; ``sandbox/pyxis.py``).

JSON (MANIFEST.json, the slot table) is ``json.dumps``, exact for any ``str``. Text that is
not UTF-8 (a path's bytes, kept by Python as surrogates) is written exactly where the language
holds bytes (Lua, Python's ``repr``) and refused where the file is UTF-8 text (TOML, Tcl,
shell: the files are written as UTF-8).

>>> print(lua('a]]"'), tcl("a{$[x]}"), toml('a"\\t\\u007f'))
"a]]\\"" a\\{\\$\\[x\\]\\} "a\\"\\t\\u007F"
>>> comment("a\\nb\\\\c")
'a\\\\nb\\\\\\\\c'
"""

from __future__ import annotations

import math
import pprint
import re
import shlex
from dataclasses import dataclass

from chainermn_rt.errors import UserError, message_value

_NOT_UTF8 = "is not UTF-8 text (it holds bytes no UTF-8 character has); allowed: UTF-8 text"


def _not_utf8(value: str, field: str) -> UserError:
    """The error for ``value``, shown as its bytes (``'caf\\xe9'``) where it can be."""
    try:
        shown = repr(value[:80].encode("utf-8", "surrogateescape"))[1:]
    except UnicodeEncodeError:  # a surrogate no byte stands for
        shown = message_value(value, quote=True)
    return UserError(f"{field}: {shown}{'...' if len(value) > 80 else ''} {_NOT_UTF8}")


def _utf8(value: str, field: str) -> str:
    """``value`` when it encodes to UTF-8 (no surrogates), else the UserError."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _not_utf8(value, field) from None
    return value


_LUA_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t"}


def lua(value: str, field: str = "a Lua string") -> str:
    """A Lua 5.3 string literal that reads back as ``value``'s bytes (UTF-8; the surrogates of
    a path's non-UTF-8 bytes as those bytes): printable characters as they are, ``"``, ``\\``,
    newline and tab as ``\\"``, ``\\\\``, ``\\n``, ``\\t``, every other character as ``\\ddd``
    escapes of its bytes (three digits, so a digit after one is not read into it). Lmod's
    ``help``, ``whatis``, ``setenv``, ``prepend_path``.

    >>> print(lua('x]]"\\n-- y\\r'), lua("\\udcff"))
    "x]]\\"\\n-- y\\013" "\\255"
    """
    out = []
    for ch in value:
        if ch in _LUA_ESCAPES:
            out.append(_LUA_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            try:
                data = ch.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a surrogate no byte stands for
                raise _not_utf8(value, field) from None
            out.append("".join(f"\\{b:03d}" for b in data))
    return '"' + "".join(out) + '"'


_TCL_PLAIN = re.compile(r"[A-Za-z0-9_./:,+=@%-]")


def tcl(value: str, field: str = "a Tcl word") -> str:
    """One Tcl word (tclsh 8.6) that reads back as ``value``, also inside a braced body such as
    a ``proc``'s. Printable text without braces or backslashes goes in braces, where nothing is
    substituted; other text is written character by character: letters, digits and
    ``_./:,+=@%-`` as they are, the other printable ASCII characters (space, braces, brackets,
    ``$``, ``;``, ``"``, ``#``, ``\\``) after a backslash, ASCII control characters as
    ``\\u00XX`` (four digits, so a hex digit after one is not read into it). Characters beyond
    ASCII stay as they are (UTF-8: Environment Modules reads module files and writes its answer
    in the same system encoding, so the bytes come back alike under a C or a UTF-8 locale).
    Refused: text that is not UTF-8 (under a UTF-8 locale Tcl would change those bytes).
    Environment Modules' ``setenv``, ``prepend-path``, ``puts``.

    >>> print(tcl(""), tcl("a [b] $c"), tcl("{x}\\n"), tcl("a\\\\"))
    {} {a [b] $c} \\{x\\}\\u000a a\\\\
    """
    _utf8(value, field)
    if not any(c in value for c in "{}\\") and all(c.isprintable() or not c.isascii()
                                                  for c in value):
        return "{" + value + "}"
    out = []
    for ch in value:
        if _TCL_PLAIN.match(ch) or not ch.isascii():
            out.append(ch)
        elif ch.isprintable():
            out.append("\\" + ch)
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


_PYTHON_ATOMS = (str, bool, int, type(None))


def python(value: object, field: str = "a Python value") -> str:
    """A Python literal that evaluates to ``value``: ``repr`` for every ``str`` (also paths
    and their non-UTF-8 bytes' surrogates), ``int``, ``bool``, ``None``, finite ``float``, and
    lists, tuples and dicts of them (``str`` keys); laid out by ``pprint``, which writes each
    ``str`` with ``repr``. Refused: ``nan``/``inf`` (``repr`` writes a name, not a number) and
    any other type (a programming error: ``TypeError``).

    >>> print(python({"a": ["x\\n", 1.5, None]}))
    {'a': ['x\\n', 1.5, None]}
    """
    def check(item: object, where: str) -> None:
        if isinstance(item, float):
            if not math.isfinite(item):
                raise UserError(f"{where}: {item}; allowed: a finite number")
        elif isinstance(item, (list, tuple)):
            for i, x in enumerate(item):
                check(x, f"{where}[{i}]")
        elif isinstance(item, dict):
            for key, x in item.items():
                if not isinstance(key, str):
                    raise TypeError(f"{where}: key {key!r} is not a str")
                check(x, f"{where}.{key}")
        elif not isinstance(item, _PYTHON_ATOMS):
            raise TypeError(f"{where}: {type(item).__name__} has no Python literal here")

    check(value, field)
    return pprint.pformat(value, width=96, sort_dicts=False)


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
                 "\r": "\\r"}
_TOML_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


def toml(value: str, field: str = "a TOML string") -> str:
    """A TOML basic string (TOML 1.0; ``tomllib`` reads it back): ``"``, ``\\`` and the control
    characters TOML names by letter escaped so, every other character that is not printable
    (control characters, DEL, line separators, format characters) as ``\\uXXXX`` or
    ``\\UXXXXXXXX``, printable characters as they are (UTF-8). Refused: text that is not UTF-8
    (a TOML file holds nothing else).

    >>> toml("a\\\\b\\x00\\u2028")
    '"a\\\\\\\\b\\\\u0000\\\\u2028"'
    """
    _utf8(value, field)
    out = []
    for ch in value:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}")
    return '"' + "".join(out) + '"'


def toml_key(value: str, field: str = "a TOML key") -> str:
    """A TOML key: bare when it may be (letters, digits, ``_``, ``-``), else quoted.

    >>> toml_key("gpu-8"), toml_key("a.b")
    ('gpu-8', '"a.b"')
    """
    return value if _TOML_BARE_KEY.match(value) else toml(value, field)


def sh(value: str, field: str = "a shell word") -> str:
    """One POSIX shell word (``shlex.quote``: single quotes, which keep everything, newlines
    too). Refused: a NUL (no shell keeps one) and text that is not UTF-8 (scripts are
    written as UTF-8).

    >>> print(sh("it's $HOME"))
    'it'"'"'s $HOME'
    """
    if "\0" in value:
        raise UserError(f"{field}: {message_value(value, quote=True)} holds a NUL character; "
                        "allowed: text without one (a shell cannot keep it)")
    return shlex.quote(_utf8(value, field))


_PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(:-\$\$)?\Z")


@dataclass(frozen=True)
class Expanding:
    """One shell word of literal text and the shell's own variables, expanded where the word
    runs: ``parts`` alternate literal text and a parameter (a variable's name, or ``NAME:-$$``
    for the shell's process id where NAME is unset).

    >>> print(sh_word(Expanding(("--container-workdir=", "PWD", ""))))
    --container-workdir="${PWD}"
    """

    parts: tuple[str, ...]

    def __post_init__(self) -> None:
        bad = [p for p in self.parts[1::2] if not _PARAMETER.match(p)]
        if bad or len(self.parts) % 2 == 0:
            raise ValueError(f"Expanding: {self.parts!r}; allowed: literal, parameter, ..., "
                             "literal")


def sh_word(value: str | Expanding, field: str = "a shell word") -> str:
    """One shell word: :func:`sh` of a string; an :class:`Expanding` word's literal parts so,
    its parameters as ``"${NAME}"``."""
    if isinstance(value, str):
        return sh(value, field)
    return "".join(f'"${{{part}}}"' if i % 2 else sh(part, field)
                   for i, part in enumerate(value.parts) if part or i % 2)


def sh_join(argv: list[str | Expanding] | tuple[str | Expanding, ...],
            field: str = "a command") -> str:
    """An argv as shell words (:func:`sh_word` each), separated by spaces."""
    return " ".join(sh_word(word, field) for word in argv)


_PLAIN_DIRECTIVE = re.compile(r"[A-Za-z0-9_.,:@%/=+-]+\Z")


_FIELD = re.compile(r"\{([a-z_]+)\}")


def sh_fill(text: str, field: str = "a shell message") -> str:
    """One shell word: ``text`` as it is (:func:`sh`), but each ``{name}`` becomes the shell's
    ``${name}`` when the word runs.

    >>> print(sh_fill("snapshot {snapshot} written; it's $5"))
    'snapshot '"${snapshot}"' written; it'"'"'s $5'
    """
    parts = _FIELD.split(text)  # literal, name, literal, ..., literal
    return "".join(f'"${{{part}}}"' if i % 2 else sh(part, field)
                   for i, part in enumerate(parts) if part or i % 2) or "''"


def directive(value: str) -> str:
    """A ``#SBATCH`` value: sbatch splits on blanks, honours ``"`` and ``\\``, and treats an
    unescaped ``#`` as the start of a comment. Control characters never get here (the Plan
    refuses them: a newline would end the line).

    >>> directive('my "big" run #1')
    '"my \\\\"big\\\\" run \\\\#1"'
    """
    if _PLAIN_DIRECTIVE.match(value):
        return value
    return '"' + re.sub(r'([\\"#])', r"\\\1", value) + '"'


def comment(value: str) -> str:
    """``value`` for the text of a line comment (``#`` in TOML, Python, shell and Tcl, ``--`` in
    Lua): printable characters as they are, ``\\`` doubled and every other character (newlines,
    carriage returns, control and format characters, non-UTF-8 bytes' surrogates) replaced by
    its Python escape (``\\n``, ``\\x1b``, ``\\u2028``, ``\\udcff``), so a comment stays one line
    and never ends in a lone backslash (Tcl continues such a comment on the next line). The
    writer starts each Lua comment with its own words (``--[[`` would open a block comment).

    >>> comment("x\\n[environment]\\tLD_PRELOAD")
    'x\\\\n[environment]\\\\tLD_PRELOAD'
    """
    return "".join(ch if ch.isprintable() and ch != "\\" else repr(ch)[1:-1] for ch in value)


_PROMETHEUS_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n"}


def prometheus_label(value: str, field: str = "a Prometheus label value") -> str:
    """A label value of Prometheus' text exposition format, quotes included: ``\\``, ``"``
    and the newline escaped, as the format allows (the file is UTF-8).

    >>> print(prometheus_label('say "hi"' + chr(92) + chr(10)))
    "say \\"hi\\"\\\\\\n"
    """
    return '"' + "".join(_PROMETHEUS_ESCAPES.get(ch, ch) for ch in _utf8(value, field)) + '"'


_WORD = re.compile(r"[A-Za-z0-9_.,:@%/+=-]+\Z")


def word(value: str, field: str = "a configuration word") -> str:
    """A word of a file that splits its lines on blanks and knows no quoting (plugstack.conf,
    enroot's fstab, which also expands ``$``): such a value as it is, anything else (a blank, a
    quote, ``$``, ``#``, a backslash, a control character) refused.

    >>> word("/tmp/state-1/etc")
    '/tmp/state-1/etc'
    """
    if not _WORD.match(value):
        raise UserError(f"{field}: {message_value(value, 200, quote=True)} is not allowed here; "
                        "allowed: letters, digits and _.,:@%/+=- (the file splits on blanks "
                        "and has no quoting)")
    return value
