"""Terraform providers' resource schemas, as the prebuilt CDK for Terraform bindings on npm carry them.

The providers themselves cannot be downloaded on the test machines (their registry is out of reach), but npm is
not: each ``@cdktf/provider-<name>`` package was generated from one provider release's schema, and its jsii
assembly (``.jsii``) lists every resource's and data source's arguments and nested blocks, by their camelCase
names. ``schema(package, version)`` fetches the package once with ``npm pack`` into cdckit's cache and keeps a
compact index of it: struct name -> {argument: the struct of its nested block, or None}.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from typing import Any

from cdckit.artifacts import cache_root

# The bindings of the newest provider release inside each module's pinned range (versions.tf).
PACKAGES = {
    "aws": ("@cdktf/provider-aws", "21.22.1"),  # hashicorp/aws 6.25.0
    "kubernetes": ("@cdktf/provider-kubernetes", "12.1.1"),  # hashicorp/kubernetes 2.38.0
    "helm": ("@cdktf/provider-helm", "12.1.2"),  # hashicorp/helm 3.1.1
    "azurerm": ("@cdktf/provider-azurerm", "14.23.1"),  # hashicorp/azurerm 4.55.0
}
META_ARGUMENTS = {"count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"}


def _nested(kind: Any) -> str | None:
    """The provider struct a property's type holds (a block, a list of blocks), or None for a plain value."""
    if isinstance(kind, dict):
        fqn = kind.get("fqn")
        if isinstance(fqn, str) and fqn.startswith("@cdktf/provider-"):
            return fqn
        for inner in (kind.get("collection", {}).get("elementtype"), *kind.get("union", {}).get("types", [])):
            found = _nested(inner)
            if found:
                return found
    return None


def schema(provider: str) -> tuple[str, dict[str, dict[str, str | None]]]:
    """The package's name and its index of structs (arguments and their nested blocks' structs)."""
    package, version = PACKAGES[provider]
    folder = cache_root() / "provider-schemas"
    index = folder / f"{package.split('/')[-1]}-{version}.json"
    if not index.exists():
        folder.mkdir(parents=True, exist_ok=True)
        packed = subprocess.run(["npm", "pack", "--silent", f"{package}@{version}"], cwd=folder, capture_output=True,
                                text=True, timeout=900, check=True).stdout.strip().splitlines()[-1]
        with tarfile.open(folder / packed) as archive:
            member = archive.extractfile("package/.jsii")
            assert member is not None
            types = json.load(member)["types"]
        structs = {fqn: {p["name"]: _nested(p["type"]) for p in kind.get("properties", [])}
                   for fqn, kind in types.items() if kind.get("kind") == "interface" and kind.get("datatype")}
        index.write_text(json.dumps(structs))
        (folder / packed).unlink()
    return package, json.loads(index.read_text())


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def config_struct(package: str, kind: str, data: bool, structs: dict[str, Any]) -> str | None:
    """``aws_ecr_repository`` -> ``@cdktf/provider-aws.ecrRepository.EcrRepositoryConfig`` (data sources:
    ``dataAwsIamPolicyDocument.DataAwsIamPolicyDocumentConfig``; where a nested block took that name, the binding
    calls the resource's own ``...AConfig``); None when the provider has no such resource."""
    name = _camel(f"data_{kind}" if data else kind.split("_", 1)[1])
    base = f"{package}.{name}.{name[:1].upper()}{name[1:]}"
    return next((base + suffix for suffix in ("AConfig", "Config") if base + suffix in structs), None)


def problems(body: dict[str, Any], struct: str, structs: dict[str, dict[str, str | None]], where: str) -> list[str]:
    """The arguments and blocks of ``body`` (python-hcl2's form) that ``struct`` does not have."""
    found: list[str] = []
    arguments = structs[struct]
    for key, value in body.items():
        if key in META_ARGUMENTS or key.startswith("__"):
            continue
        if key == "dynamic":
            for dynamic in value if isinstance(value, list) else [value]:
                for label, spec in dynamic.items():
                    nested = arguments.get(_camel(label))
                    if nested is None:
                        found.append(f"{where}: dynamic {label} is not a block of {struct}")
                        continue
                    content = spec.get("content", [{}])
                    for block in content if isinstance(content, list) else [content]:
                        found += problems(block, nested, structs, f"{where}.{label}")
            continue
        name = _camel(key)
        if name not in arguments:
            found.append(f"{where}: {key} is not an argument of {struct.rsplit('.', 1)[-1]}")
            continue
        nested = arguments[name]
        if nested is not None and isinstance(value, (dict, list)):
            for block in value if isinstance(value, list) else [value]:
                if isinstance(block, dict):
                    found += problems(block, nested, structs, f"{where}.{key}")
    return found
