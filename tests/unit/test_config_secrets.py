"""Secrets in config are redacted by declaration (issue 22 item 1): every config dataclass of every process, a
field named like a secret is ``conf.secret()``, and a declared one never shows its value in ``conf.render``
(--print-config, GET_BROKER_CONFIG), in ``repr`` or in a loader error."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from common import conf
from common.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "namesrv", "common", "ctl", "harness", "deploy", "client", "connectors", "remoting")
SECRET_NAME = re.compile(r"secret|passw|token|credential|private|access_?key|api_?key|auth_?key", re.I)
SENTINEL = "sentinel-secret-value-0123456789abcdef"
KNOWN_SECRET_KEYS = {"haAuthSecret", "haAuthSecretFile"}


def _config_modules() -> list[str]:
    """Modules that import ``common.conf`` (where config dataclasses are declared), by AST: nothing is skipped
    because it failed to import."""
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "pb" in path.relative_to(ROOT).parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (isinstance(node, ast.ImportFrom) and node.module == "common"
                        and any(a.name == "conf" for a in node.names)) or (
                        isinstance(node, ast.Import) and any(a.name == "common.conf" for a in node.names)):
                    rel = path.relative_to(ROOT).with_suffix("")
                    out.append(".".join(rel.parts).removesuffix(".__init__"))
                    break
    return out


def _config_classes() -> list[type]:
    seen: dict[str, type] = {}
    for name in _config_modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == name:
                seen[f"{name}.{obj.__qualname__}"] = obj
    return [seen[k] for k in sorted(seen)]


CLASSES = _config_classes()


def test_the_walk_finds_the_config_classes_of_broker_and_nameserver():
    names = {c.__name__ for c in CLASSES}
    assert {"BrokerConfig", "MessageStoreConfig", "NamesrvConfig"} <= names, names
    declared = {conf.conf_key(f) for c in CLASSES for f in dataclasses.fields(c) if conf.is_secret(f)}
    assert declared >= KNOWN_SECRET_KEYS


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_field_named_like_a_secret_is_declared_secret(cls):
    bad = [f.name for f in dataclasses.fields(cls) if SECRET_NAME.search(f.name) and not conf.is_secret(f)]
    assert not bad, f"declare these with conf.secret() so config reads, repr and errors redact them: {bad}"


def _with_secret(cls: type, field: dataclasses.Field):
    """A default instance with ``field`` set to SENTINEL, or None when the class has no default instance."""
    try:
        base = cls()
    except TypeError:
        return None
    return dataclasses.replace(base, **{field.name: SENTINEL})


SECRET_FIELDS = [(c, f) for c in CLASSES for f in dataclasses.fields(c) if conf.is_secret(f)]


@pytest.mark.parametrize("cls,field", SECRET_FIELDS, ids=lambda x: getattr(x, "__name__", getattr(x, "name", "")))
def test_a_set_secret_renders_as_the_marker_and_stays_out_of_repr(cls, field):
    obj = _with_secret(cls, field)
    assert obj is not None, f"{cls.__name__} has no default instance to check"
    pairs = dict(conf.render(obj))
    assert pairs[conf.conf_key(field)] == conf.SECRET_MARKER
    assert SENTINEL not in repr(pairs) and SENTINEL not in repr(obj)
    assert dict(conf.render(cls()))[conf.conf_key(field)] == "", "an unset secret reads empty"


def test_broker_settings_and_print_config_never_show_the_secret_or_its_file(tmp_path):
    from broker.__main__ import render
    from broker.config import load_broker_settings

    secret_file = tmp_path / "very-private-dir" / "ha-auth-secret"
    secret_file.parent.mkdir()
    secret_file.write_text(SENTINEL + "\n")
    for line in (f"haAuthSecret={SENTINEL}", f"haAuthSecretFile={secret_file}"):
        path = tmp_path / "broker.conf"
        path.write_text(f"brokerRole=SYNC_MASTER\n{line}\n")
        settings = load_broker_settings(path, environ={})
        shown = dict(render(settings))
        key = line.split("=", 1)[0]
        assert shown[key] == conf.SECRET_MARKER
        for text in (repr(shown), repr(settings)):
            assert SENTINEL not in text and "very-private-dir" not in text


def test_the_marker_read_back_as_a_secret_is_refused_with_what_to_do(tmp_path):
    from broker.config import load_broker_settings

    path = tmp_path / "broker.conf"
    path.write_text(f"haAuthSecret={conf.SECRET_MARKER}\n")
    with pytest.raises(ConfigError, match="not a secret") as err:
        load_broker_settings(path, environ={})
    assert "haAuthSecret" in str(err.value)


def test_a_malformed_line_is_reported_without_its_value(tmp_path):
    with pytest.raises(ConfigError, match="line 2 is not 'key=value'") as err:
        conf.parse_properties(f"brokerId=0\nhaAuthSecret {SENTINEL}\n", "broker.conf")
    assert SENTINEL not in str(err.value) and "haAuthSecret" in str(err.value)
