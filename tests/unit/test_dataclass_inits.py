"""The dataclasses of the per-record path write their own `__init__` (`init=False`): mypyc
compiles it, where the one dataclasses would generate runs as Python (gateway/compiled.py).
Each must take exactly its fields, in order, with their defaults."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import pytest

import gateway.core
import gateway.processor
import gateway.stage


def _own_inits() -> list[type]:
    found = []
    for package in (gateway.core, gateway.processor, gateway.stage):
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for value in vars(module).values():
                params = getattr(value, "__dataclass_params__", None)
                if params is not None and not params.init and value.__module__ == module.__name__:
                    found.append(value)
    return found


OWN_INITS = _own_inits()


def test_the_hot_dataclasses_have_their_own_init() -> None:
    names = {cls.__name__ for cls in OWN_INITS}
    assert {"Entry", "Decision", "Envelope", "Request", "Source", "Output"} <= names


@pytest.mark.parametrize("cls", OWN_INITS, ids=lambda cls: cls.__qualname__)
def test_an_own_init_takes_the_fields_in_order_with_their_defaults(cls: type) -> None:
    def default(field: dataclasses.Field) -> object:  # type: ignore[type-arg]
        return inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default

    try:
        signature = inspect.signature(cls)
    except ValueError:  # compiled, without one: test_compiled.py runs this on the sources
        pytest.skip("no signature where compiled")
    fields = [(f.name, default(f)) for f in dataclasses.fields(cls)]
    params = [(p.name, p.default) for p in signature.parameters.values()]
    assert params == fields
