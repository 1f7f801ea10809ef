"""Run parameters: one typed object per simulator run, serialized to JSON in one place.

The simulator is a separate process. A launcher hands the tests of one simulator run one frozen dataclass::

    @dataclass(frozen=True)
    class DcohParams:
        bench: BenchConfig = BenchConfig()
        messages: int = 1500

    cb.run(build, __name__, seed=seed, params=DcohParams(messages=1500))   # launcher
    P = params.current(DcohParams)                                        # in the test

:func:`cosim.build.run` writes the object with :func:`dump` to ``params.json`` in the run's
directory and passes that file's path in the one variable :data:`PARAMS_ENV`; :func:`load`
(or :func:`current`, which gives the defaults outside a run) reads it back into the same type (nested dataclasses included) and refuses a file written for
another type. Field types are those JSON carries (``int``, ``float``, ``str``, ``bool``,
``None``, lists, string-keyed dicts) and nested dataclasses; a field annotated with a dataclass
type (or ``X | None``) is rebuilt as that type.
"""
from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from pathlib import Path

__all__ = ["PARAMS_ENV", "ParamsError", "current", "dump", "load", "load_any", "write"]

PARAMS_ENV = "TRAININGCXL_RUN_PARAMS"


class ParamsError(ValueError):
    """The run's parameter file is missing, malformed or of another type than asked for."""


def _type_name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def dump(obj) -> str:
    """JSON text of a dataclass instance, tagged with its type's import path."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"run parameters must be a dataclass instance, got {obj!r}")
    return json.dumps({"type": _type_name(type(obj)), "fields": dataclasses.asdict(obj)},
                      sort_keys=True, indent=1)


def write(obj, path: Path) -> Path:
    """Write :func:`dump` of ``obj`` to ``path``; returns the path."""
    path = Path(path)
    path.write_text(dump(obj))
    return path


def _decode(tp, value):
    """``value`` (decoded JSON) as type ``tp``: dataclasses are rebuilt, the rest passes."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg) and isinstance(value, dict):
                return _build(arg, value)
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value)
    if (tp is tuple or origin is tuple) and isinstance(value, list):
        return tuple(value)
    return value


def _build(cls, fields: dict):
    if not isinstance(fields, dict):
        raise ParamsError(f"{_type_name(cls)}: expected an object, got {fields!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise ParamsError(f"{_type_name(cls)}: unknown fields {unknown}")
    return cls(**{k: _decode(hints.get(k), v) for k, v in fields.items()})


def _read(path=None) -> tuple[str, dict]:
    path = path if path is not None else os.environ.get(PARAMS_ENV)
    if not path:
        raise ParamsError(f"no run parameters: {PARAMS_ENV} is not set (cosim.build.run sets it "
                          "when given params=)")
    try:
        doc = json.loads(Path(path).read_text())
        return doc["type"], doc["fields"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ParamsError(f"bad run parameter file {path}: {e}") from None


def load(cls, path=None):
    """The run's parameters as ``cls`` (from ``path``, default the file named by
    :data:`PARAMS_ENV`). Raises :class:`ParamsError` when they were written for another type."""
    name, fields = _read(path)
    if name != _type_name(cls):
        raise ParamsError(f"run parameters are a {name}, not a {_type_name(cls)}")
    return _build(cls, fields)


def load_any(path=None):
    """The run's parameters as the type named in the file (imported), or None when the run has
    no parameter file."""
    if path is None and not os.environ.get(PARAMS_ENV):
        return None
    name, fields = _read(path)
    import importlib
    module, _, qual = name.rpartition(".")
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return _build(obj, fields)


def current(cls):
    """The run's parameters as ``cls``; ``cls()`` (its defaults) when no parameter file is set,
    as when pytest imports a test module outside the simulator."""
    if not os.environ.get(PARAMS_ENV):
        return cls()
    return load(cls)
