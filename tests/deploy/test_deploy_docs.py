"""docs/deployment.md: its settings table covers exactly the service's settings."""

from __future__ import annotations

import re

from deploy_helpers import ROOT, setting_defaults, settings_fields

DOC = ROOT / "docs" / "deployment.md"


def table_settings() -> list[str]:
    return re.findall(r"^\| `MT_([A-Z0-9_]+)` \|", DOC.read_text(), re.MULTILINE)


def test_settings_table_lists_every_setting_once():
    rows = table_settings()
    assert len(rows) == len(set(rows)), "a setting appears twice"
    documented = {name.lower() for name in rows}
    fields = settings_fields()
    assert not fields - documented, f"undocumented settings: {sorted(fields - documented)}"
    assert not documented - fields, f"documented but not settings: {sorted(documented - fields)}"


def test_settings_table_defaults_match_the_code():
    defaults = setting_defaults()  # no environment read: the class defaults
    rows = dict(re.findall(r"^\| `MT_([A-Z0-9_]+)` \| `([^`]*)` \|", DOC.read_text(), re.MULTILINE))
    for name, shown in rows.items():
        value = defaults[f"MT_{name}"]
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, list):
            value = ",".join(value)
        elif isinstance(value, float) and value.is_integer():
            value = int(value)
        if name == "MODEL_REPOSITORY":
            value = "./" + value.name
        assert shown == str(value), f"MT_{name}: docs say {shown!r}, code says {value!r}"
