"""The exporter's PEP 517 build backend: standard library only.

pip builds a project with the backend its pyproject.toml names. setuptools
below 70.1 (Debian 12 ships 66, Python 3.11's ensurepip 65) cannot build a
wheel without the separate `wheel` package, which a fresh virtual
environment lacks and an offline pip cannot fetch. This backend needs
nothing but the interpreter, so

    pip install --no-index --no-build-isolation --no-deps ./exporters/pytorch

works in any environment with pip, with or without network or system site
packages.

It reads [project] from pyproject.toml (the keys in PROJECT_KEYS; any
other is an error, so nothing is dropped silently) and [tool.gatekeeper-build]:
packages (what the wheel holds) and sdist-include (what else the sdist
holds). It writes reproducible archives (fixed timestamps and modes, sorted
entries; SOURCE_DATE_EPOCH is honoured). The hooks run with the project
directory as the working directory, as PEP 517 says.
"""

from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENERATOR = "gatekeeper_build 1"
TAG = "py3-none-any"
PROJECT_KEYS = {"name", "version", "description", "readme", "requires-python", "dependencies",
                "entry-points", "scripts", "gui-scripts"}
README_TYPES = {".md": "text/markdown", ".rst": "text/x-rst", ".txt": "text/plain"}
SKIP_DIRS = {"__pycache__"}
SKIP_SUFFIXES = (".pyc", ".pyo")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$")
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


class BuildError(Exception):
    """A pyproject.toml this backend cannot build, with the reason."""


@dataclass(frozen=True)
class Project:
    """What the archives are built from: pyproject.toml, read and checked."""

    root: Path
    name: str
    version: str
    summary: str
    readme: str  # path relative to root, "" for none
    requires_python: str
    dependencies: tuple[str, ...]
    entry_points: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # (group, ((name, value), ...))
    packages: tuple[str, ...]
    sdist_include: tuple[str, ...]

    @property
    def dist_name(self) -> str:
        """The name as wheel and sdist file names spell it."""
        return normalize(self.name)

    @property
    def dist_info(self) -> str:
        return f"{self.dist_name}-{self.version}.dist-info"

    @property
    def wheel_name(self) -> str:
        return f"{self.dist_name}-{self.version}-{TAG}.whl"


def normalize(name: str) -> str:
    """PEP 503 normalisation with underscores, as distribution file names need."""
    return re.sub(r"[-_.]+", "_", name).lower()


def read_project(root: Path) -> Project:
    """Reads and checks root/pyproject.toml. Raises BuildError."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # Python 3.10: the subset of TOML this file uses
        from gatekeeper_build_toml import TomlError, loads

        try:
            doc = loads(text)
        except TomlError as e:
            raise BuildError(f"pyproject.toml: {e}") from e
    else:
        doc = tomllib.loads(text)
    project = doc.get("project")
    if not isinstance(project, dict):
        raise BuildError("pyproject.toml: no [project] table")
    unknown = sorted(set(project) - PROJECT_KEYS)
    if unknown:
        raise BuildError(f"pyproject.toml: [project] keys {unknown} are not supported "
                         "by build_backend/gatekeeper_build.py")
    name, version = _string(project, "name"), _string(project, "version")
    if not _NAME.match(name):
        raise BuildError(f"pyproject.toml: project.name {name!r} is not a valid name")
    if not _VERSION.match(version):
        raise BuildError(f"pyproject.toml: project.version {version!r} is not a plain PEP 440 version")
    readme = project.get("readme", "")
    if not isinstance(readme, str):
        raise BuildError("pyproject.toml: project.readme must be a file name")
    if readme and Path(readme).suffix.lower() not in README_TYPES:
        raise BuildError(f"pyproject.toml: project.readme {readme!r}: want one of {sorted(README_TYPES)}")
    tool = doc.get("tool", {}).get("gatekeeper-build", {})
    packages = _strings(tool, "packages", "tool.gatekeeper-build.packages")
    if not packages:
        raise BuildError("pyproject.toml: tool.gatekeeper-build.packages is empty")
    for p in packages:
        if not (root / p / "__init__.py").is_file():
            raise BuildError(f"pyproject.toml: package {p!r} has no {p}/__init__.py")
    return Project(
        root=root, name=name, version=version,
        summary=_string(project, "description", required=False),
        readme=readme,
        requires_python=_string(project, "requires-python", required=False),
        dependencies=_strings(project, "dependencies", "project.dependencies"),
        entry_points=_entry_points(project),
        packages=packages,
        sdist_include=_strings(tool, "sdist-include", "tool.gatekeeper-build.sdist-include"),
    )


def _string(table: dict[str, Any], key: str, required: bool = True) -> str:
    value = table.get(key, None if required else "")
    if not isinstance(value, str) or "\n" in value:
        raise BuildError(f"pyproject.toml: project.{key} must be a one-line string")
    return value


def _strings(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BuildError(f"pyproject.toml: {where} must be a list of strings")
    return tuple(value)


def _entry_points(project: dict[str, Any]) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    groups: dict[str, Any] = dict(project.get("entry-points", {}))
    for key, group in (("scripts", "console_scripts"), ("gui-scripts", "gui_scripts")):
        if key in project:
            if group in groups:
                raise BuildError(f"pyproject.toml: use project.{key}, not entry-points.{group}")
            groups[group] = project[key]
    out = []
    for group, entries in groups.items():
        if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
            raise BuildError(f"pyproject.toml: entry points of {group!r} must map names to strings")
        out.append((group, tuple(entries.items())))
    return tuple(out)


# --- the metadata files ---------------------------------------------------------------------------


def metadata(p: Project) -> bytes:
    """The core metadata (METADATA, and PKG-INFO in the sdist): headers, then the readme."""
    headers = [("Metadata-Version", "2.1"), ("Name", p.name), ("Version", p.version)]
    if p.summary:
        headers.append(("Summary", p.summary))
    if p.requires_python:
        headers.append(("Requires-Python", p.requires_python))
    headers.extend(("Requires-Dist", d) for d in p.dependencies)
    body = ""
    if p.readme:
        headers.append(("Description-Content-Type", README_TYPES[Path(p.readme).suffix.lower()]))
        body = "\n" + (p.root / p.readme).read_text(encoding="utf-8")
    return ("".join(f"{k}: {v}\n" for k, v in headers) + body).encode()


def entry_points_txt(p: Project) -> bytes:
    lines = []
    for group, entries in p.entry_points:
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in entries)
        lines.append("")
    return "\n".join(lines).encode()


def wheel_txt() -> bytes:
    return f"Wheel-Version: 1.0\nGenerator: {GENERATOR}\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()


def dist_info_files(p: Project) -> list[tuple[str, bytes]]:
    """The .dist-info files but RECORD, as (path inside the wheel, content)."""
    files = [(f"{p.dist_info}/METADATA", metadata(p)), (f"{p.dist_info}/WHEEL", wheel_txt())]
    if p.entry_points:
        files.append((f"{p.dist_info}/entry_points.txt", entry_points_txt(p)))
    return files


def record(files: list[tuple[str, bytes]], record_path: str) -> bytes:
    """RECORD: every file with its sha256 (urlsafe base64, unpadded) and size; itself without."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        w.writerow([path, f"sha256={digest}", len(data)])
    w.writerow([record_path, "", ""])
    return out.getvalue().encode()


# --- the archives ---------------------------------------------------------------------------------


def _tree(root: Path, rel: str) -> list[str]:
    """rel (a file or a folder under root) as sorted file paths relative to root, caches left out."""
    path = root / rel
    if path.is_file():
        return [rel]
    if not path.is_dir():
        raise BuildError(f"{rel}: no such file or folder in {root}")
    found = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for f in filenames:
            if not f.endswith(SKIP_SUFFIXES):
                found.append((Path(dirpath) / f).relative_to(root).as_posix())
    return sorted(found)


def _epoch() -> int:
    """SOURCE_DATE_EPOCH, else 1980-01-01 (the earliest a zip can hold)."""
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "0") or 0), 315532800)


def write_wheel(directory: str, p: Project, files: list[tuple[str, bytes]]) -> str:
    """Writes files plus the dist-info (RECORD last) as p's wheel in directory; returns its name."""
    files = files + dist_info_files(p)
    record_path = f"{p.dist_info}/RECORD"
    files.append((record_path, record(files, record_path)))
    stamp = time.gmtime(_epoch())[:6]
    target = Path(directory) / p.wheel_name
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return p.wheel_name


def _package_files(p: Project) -> list[tuple[str, bytes]]:
    return [(rel, (p.root / rel).read_bytes()) for pkg in p.packages for rel in _tree(p.root, pkg)]


def _finder(p: Project) -> tuple[str, bytes]:
    """The module an editable install imports at start-up (from its .pth) to find the packages."""
    module = f"__editable___{p.dist_name}_finder"
    sources = {pkg: str((p.root / pkg).resolve()) for pkg in p.packages}
    code = f'''"""Installed by an editable install of {p.name}: imports its packages from the source tree."""

import importlib.abc
import importlib.util
import os
import sys

SOURCES = {sources!r}


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        src = SOURCES.get(fullname)
        if src is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(src, "__init__.py"), submodule_search_locations=[src])


def install():
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.append(Finder())
'''
    return f"{module}.py", code.encode()


# --- the PEP 517 and PEP 660 hooks ----------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: dict[str, Any] | None = None) -> str:
    """Writes the .dist-info folder (no RECORD) into metadata_directory; returns its name."""
    p = read_project(Path.cwd())
    for path, data in dist_info_files(p):
        target = Path(metadata_directory) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return p.dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    """Builds the wheel (the packages and the .dist-info) into wheel_directory."""
    p = read_project(Path.cwd())
    return write_wheel(wheel_directory, p, _package_files(p))


def build_editable(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                   metadata_directory: str | None = None) -> str:
    """Builds an editable wheel: a .pth that installs a finder for the packages in the source tree.

    Only the packages are importable from there, not the folders beside
    them (tests/ is not put on sys.path).
    """
    p = read_project(Path.cwd())
    finder, code = _finder(p)
    module = finder[: -len(".py")]
    pth = (f"__editable__.{p.dist_name}-{p.version}.pth", f"import {module}; {module}.install()\n".encode())
    return write_wheel(wheel_directory, p, [(finder, code), pth])


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """Builds NAME-VERSION.tar.gz: pyproject.toml, PKG-INFO, the packages and sdist-include."""
    p = read_project(Path.cwd())
    base = f"{p.dist_name}-{p.version}"
    rels = sorted({rel for item in ("pyproject.toml", *p.packages, *p.sdist_include) for rel in _tree(p.root, item)})
    members = [("PKG-INFO", metadata(p))] + [(rel, (p.root / rel).read_bytes()) for rel in rels]
    name = f"{base}.tar.gz"
    epoch = _epoch()
    with open(Path(sdist_directory) / name, "wb") as raw:
        # gzip's own header carries a time too: pin it for reproducible bytes.
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=epoch) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, data in members:
                info = tarfile.TarInfo(f"{base}/{rel}")
                info.size, info.mtime, info.mode = len(data), epoch, 0o644
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
    return name
