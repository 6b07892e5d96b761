"""Regenerates keda-scaledobject-v1alpha1.json, the JSON schema the deployment tests check ScaledObjects with.

Source: the PyPI package cloudcoil-models-keda (Apache-2.0), whose pydantic models are generated from KEDA's own
CRD (keda.sh_scaledobjects, the version in the package's version: 2.16.1.0 = KEDA v2.16.1). Their JSON schema is
the CRD's openAPIV3Schema; objects are then closed (additionalProperties: false), as the API server's strict field
validation (`kubectl apply --validate=strict`) treats fields a structural schema does not know. Not run by the
tests (they read the file); run it in a throwaway venv:

    python -m venv /tmp/keda && /tmp/keda/bin/pip install cloudcoil-models-keda==2.16.1.0
    /tmp/keda/bin/python tests/deploy/schemas/make_keda_schema.py
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

from cloudcoil.models.keda.v1alpha1 import ScaledObject

OUT = Path(__file__).with_name("keda-scaledobject-v1alpha1.json")


def close(node: object) -> None:
    """additionalProperties: false on every object that lists its properties (maps keep their value schema)."""
    if isinstance(node, dict):
        node.pop("title", None)
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for value in node.values():
            close(value)
    elif isinstance(node, list):
        for value in node:
            close(value)


def main() -> None:
    schema = ScaledObject.model_json_schema(by_alias=True, mode="validation")
    close(schema)
    schema["$comment"] = (
        f"KEDA ScaledObject (keda.sh/v1alpha1) from cloudcoil-models-keda {version('cloudcoil-models-keda')} "
        "(generated from KEDA's CRD); objects closed. Regenerate with make_keda_schema.py."
    )
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]  # what the API server requires of any object
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    OUT.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
