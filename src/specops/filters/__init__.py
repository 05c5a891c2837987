"""The Ansible↔Python seam: every Jinja filter the roles call, by concern, one module each.

Each module here exports ``FILTERS``: a filter's name -> the specops function it is, or a typed adapter beside it
that only converts what Ansible hands over (templated text, None for unset, a registered result) and calls exactly
one specops function. The files in plugins/filter/ only union these (tests/unit/test_filter_seam.py keeps them so,
and keeps every name the roles use served). This module holds the one error mapping (:func:`refused`) and the
coercions more than one adapter needs.

Ansible forks a worker per task and host, and a worker loads every legacy filter file the first time it looks up
any filter by its short name: these modules are imported once per *task* (less where the specops_preload callback
loads them first). Their module-level imports stay light; a specops module that pulls in httpx, gguf or numpy is
imported inside the adapter that needs it (tests/unit/test_import_weight.py keeps it so)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ansible.errors import AnsibleFilterError

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def refused(*errors: type[Exception], prefix: str = "") -> Iterator[None]:
    """One of ``errors`` raised inside fails the task as ``AnsibleFilterError(prefix + its message)``: one line,
    never a templating traceback."""
    try:
        yield
    except errors as exc:
        raise AnsibleFilterError(f"{prefix}{exc}") from exc


def refusing(func: F, *errors: type[Exception], prefix: str = "") -> F:
    """``func`` as a filter, under :func:`refused` (its name, module and docstring kept)."""

    @functools.wraps(func)
    def as_filter(*args: Any, **kwargs: Any) -> Any:
        with refused(*errors, prefix=prefix):
            return func(*args, **kwargs)

    return as_filter  # type: ignore[return-value]


def optional_int(value: Any) -> int | None:
    """An optional integer role setting: None and '' (unset) -> None, '16' or 16 -> 16."""
    return None if value in (None, "") else int(value)


def strings(values: Any) -> list[str]:
    """A list Ansible hands over (None = empty) as strings."""
    return [str(v) for v in values or []]


def json_object(value: Any, what: str) -> dict[str, Any]:
    """A JSON object Ansible hands over as text (a command's stdout) or already parsed; anything else is refused
    (ValueError naming ``what``)."""
    data = json.loads(value) if isinstance(value, str | bytes) else value
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return data
