"""The in-tree build backend (build_backend/): the wheel, the editable wheel, the sdist.

scripts/test-python.sh installs the package with pip into a fresh virtual
environment; these tests check what pip is handed, file by file.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile
from pathlib import Path

import gatekeeper_exporter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "build_backend"))  # as pip does with backend-path

import gatekeeper_build  # noqa: E402
import gatekeeper_build_toml  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

DIST_INFO = f"gatekeeper_torch_exporter-{gatekeeper_exporter.__version__}.dist-info"
ENTRY_POINT = ("vllm.general_plugins", "gatekeeper_exporter", "gatekeeper_exporter.vllm_plugin:register")


def temp_dir(testcase: unittest.TestCase) -> Path:
    path = tempfile.mkdtemp(prefix="gatekeeper-build-test-")
    testcase.addCleanup(shutil.rmtree, path, True)
    return Path(path)


def package_files() -> list[str]:
    return sorted(f"gatekeeper_exporter/{f}" for f in os.listdir(ROOT / "gatekeeper_exporter") if f.endswith(".py"))


class BuildTest(unittest.TestCase):
    def setUp(self):
        self.tmp = temp_dir(self)
        self.chdir(ROOT)  # PEP 517: hooks run in the project folder

    def chdir(self, path: Path) -> None:
        old = os.getcwd()
        os.chdir(path)
        self.addCleanup(os.chdir, old)

    def build(self, hook, name: str) -> Path:
        out = self.tmp / name
        out.mkdir()
        return out / hook(str(out))

    def test_wheel_files_and_record(self):
        wheel = self.build(gatekeeper_build.build_wheel, "wheel")
        self.assertEqual(wheel.name, f"gatekeeper_torch_exporter-{gatekeeper_exporter.__version__}-py3-none-any.whl")
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            want = package_files() + [f"{DIST_INFO}/{f}" for f in ("METADATA", "WHEEL", "entry_points.txt", "RECORD")]
            self.assertEqual(names, want)  # no tests/, no build_backend/, no caches; RECORD last
            rows = list(csv.reader(io.StringIO(z.read(f"{DIST_INFO}/RECORD").decode())))
            self.assertEqual([r[0] for r in rows], names)
            for path, hash_, size in rows:
                with self.subTest(path=path):
                    if path.endswith("/RECORD"):
                        self.assertEqual((hash_, size), ("", ""))
                        continue
                    data = z.read(path)
                    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    self.assertEqual((hash_, size), (f"sha256={digest}", str(len(data))))
            for info in z.infolist():
                self.assertEqual(info.external_attr >> 16, 0o100644, info.filename)
            self.assertEqual(z.read(f"{DIST_INFO}/WHEEL").decode(),
                             "Wheel-Version: 1.0\nGenerator: gatekeeper_build 1\nRoot-Is-Purelib: true\nTag: py3-none-any\n")

    def test_wheel_metadata_as_importlib_reads_it(self):
        wheel = self.build(gatekeeper_build.build_wheel, "wheel")
        site = self.tmp / "site"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        dists = list(importlib.metadata.distributions(path=[str(site)]))
        self.assertEqual(len(dists), 1)
        d = dists[0]
        self.assertEqual(d.metadata["Name"], "gatekeeper-torch-exporter")
        self.assertEqual(d.version, gatekeeper_exporter.__version__)  # pyproject.toml and __version__ agree
        self.assertEqual(d.metadata["Requires-Python"], ">=3.10")
        self.assertEqual(d.metadata["Description-Content-Type"], "text/markdown")
        self.assertIsNone(d.requires)
        eps = [(e.group, e.name, e.value) for e in d.entry_points]
        self.assertEqual(eps, [ENTRY_POINT])
        body = d.read_text("METADATA").split("\n\n", 1)[1]  # headers, a blank line, the readme
        self.assertEqual(body, (ROOT / "README.md").read_text(encoding="utf-8"))

    def test_prepare_metadata_matches_the_wheel(self):
        meta = self.tmp / "meta"
        meta.mkdir()
        name = gatekeeper_build.prepare_metadata_for_build_wheel(str(meta))
        self.assertEqual(name, DIST_INFO)
        wheel = self.build(gatekeeper_build.build_wheel, "wheel")
        with zipfile.ZipFile(wheel) as z:
            for f in sorted(os.listdir(meta / name)):
                with self.subTest(file=f):
                    self.assertEqual((meta / name / f).read_bytes(), z.read(f"{name}/{f}"))
        self.assertEqual(sorted(os.listdir(meta / name)), ["METADATA", "WHEEL", "entry_points.txt"])

    def test_reproducible(self):
        a = self.build(gatekeeper_build.build_wheel, "a").read_bytes()
        b = self.build(gatekeeper_build.build_wheel, "b").read_bytes()
        self.assertEqual(a, b)
        c = self.build(gatekeeper_build.build_sdist, "c").read_bytes()
        d = self.build(gatekeeper_build.build_sdist, "d").read_bytes()
        self.assertEqual(c, d)

    def test_editable_imports_from_the_source_tree(self):
        wheel = self.build(gatekeeper_build.build_editable, "editable")
        site = self.tmp / "site"
        with zipfile.ZipFile(wheel) as z:
            self.assertEqual(sorted(n for n in z.namelist() if not n.startswith(DIST_INFO)),
                             ["__editable__.gatekeeper_torch_exporter-0.1.0.pth",
                              "__editable___gatekeeper_torch_exporter_finder.py"])
            z.extractall(site)
        # A clean interpreter (-I: no PYTHONPATH, no cwd on sys.path; -B: no caches written)
        # that reads the .pth as site-packages would.
        code = ("import site, sys, importlib.util; site.addsitedir(sys.argv[1]); "
                "import gatekeeper_exporter.vllm_plugin as p; print(p.__file__); "
                "spec = importlib.util.find_spec('tests'); print(spec.origin if spec else None)")
        out = subprocess.run([sys.executable, "-I", "-B", "-c", code, str(site)], cwd=self.tmp,
                             capture_output=True, text=True, timeout=30, check=True).stdout.splitlines()
        self.assertEqual(out[0], str(ROOT / "gatekeeper_exporter" / "vllm_plugin.py"))
        self.assertFalse(out[1].startswith(str(ROOT)), "the editable install put the project folder on sys.path")

    def test_sdist_builds_the_same_wheel(self):
        sdist = self.build(gatekeeper_build.build_sdist, "sdist")
        base = f"gatekeeper_torch_exporter-{gatekeeper_exporter.__version__}"
        self.assertEqual(sdist.name, f"{base}.tar.gz")
        with tarfile.open(sdist) as tar:
            names = tar.getnames()
            for want in ("PKG-INFO", "pyproject.toml", "README.md", "build_backend/gatekeeper_build.py",
                         "build_backend/gatekeeper_build_toml.py", "gatekeeper_exporter/__init__.py",
                         "tests/test_build.py", "testdata/memory_blocks.golden.json"):
                self.assertIn(f"{base}/{want}", names)
            self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")])
            tar.extractall(self.tmp / "unpacked")
        from_tree = self.build(gatekeeper_build.build_wheel, "from-tree").read_bytes()
        self.chdir(self.tmp / "unpacked" / base)
        from_sdist = self.build(gatekeeper_build.build_wheel, "from-sdist").read_bytes()
        self.assertEqual(from_sdist, from_tree)

    def test_no_build_requirements(self):
        for hook in (gatekeeper_build.get_requires_for_build_wheel, gatekeeper_build.get_requires_for_build_sdist,
                     gatekeeper_build.get_requires_for_build_editable):
            self.assertEqual(hook(), [])


class ProjectTest(unittest.TestCase):
    GOOD = ('[project]\nname = "x-y"\nversion = "1.2"\n'
            '[tool.gatekeeper-build]\npackages = ["pkg"]\n')

    def read(self, text: str, package: bool = True) -> gatekeeper_build.Project:
        root = temp_dir(self)
        (root / "pyproject.toml").write_text(text, encoding="utf-8")
        if package:
            (root / "pkg").mkdir()
            (root / "pkg" / "__init__.py").write_text("", encoding="utf-8")
        return gatekeeper_build.read_project(root)

    def test_minimal(self):
        p = self.read(self.GOOD)
        self.assertEqual((p.dist_name, p.version, p.wheel_name), ("x_y", "1.2", "x_y-1.2-py3-none-any.whl"))
        self.assertEqual(gatekeeper_build.metadata(p), b"Metadata-Version: 2.1\nName: x-y\nVersion: 1.2\n")

    def test_scripts_are_console_scripts(self):
        p = self.read(self.GOOD.replace("[tool.", '[project.scripts]\nx = "pkg:main"\n[tool.'))
        self.assertEqual(gatekeeper_build.entry_points_txt(p), b"[console_scripts]\nx = pkg:main\n")

    def test_refused(self):
        # Whatever the backend would not carry into the wheel is an error, not a silent loss.
        cases = [
            (self.GOOD.replace('version = "1.2"', 'version = "1.2"\nlicense = "MIT"'), "['license'] are not supported"),
            (self.GOOD.replace('version = "1.2"', 'dynamic = ["version"]'), "['dynamic'] are not supported"),
            (self.GOOD.replace('version = "1.2"\n', ""), "project.version must be"),
            (self.GOOD.replace('"1.2"', '"1.2-local"'), "not a plain PEP 440 version"),
            (self.GOOD.replace('"x-y"', '"-x"'), "not a valid name"),
            (self.GOOD.replace('packages = ["pkg"]', 'packages = ["nope"]'), "package 'nope' has no nope/__init__.py"),
            (self.GOOD.replace('packages = ["pkg"]', "packages = []"), "packages is empty"),
            ('[tool.gatekeeper-build]\npackages = ["pkg"]\n', "no [project] table"),
        ]
        for text, want in cases:
            with self.subTest(want=want):
                with self.assertRaises(gatekeeper_build.BuildError) as cm:
                    self.read(text)
                self.assertIn(want, str(cm.exception))

    def test_normalize(self):
        for name, want in [("gatekeeper-torch-exporter", "gatekeeper_torch_exporter"), ("A.b__C", "a_b_c")]:
            self.assertEqual(gatekeeper_build.normalize(name), want)


class TomlSubsetTest(unittest.TestCase):
    """The reader used on Python 3.10, where tomllib is missing."""

    @unittest.skipIf(tomllib is None, "needs tomllib to compare with")
    def test_reads_pyproject_like_tomllib(self):
        text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
        self.assertEqual(gatekeeper_build_toml.loads(text), tomllib.loads(text))

    def test_cases(self):
        good = [
            ('[a."b.c"]\nk = "v" # c\n', {"a": {"b.c": {"k": "v"}}}),
            ('k = [\n  "a", # one\n  "b",\n]\n', {"k": ["a", "b"]}),
            ("k = 'C:\\x'\nn = -3\nt = true\n", {"k": "C:\\x", "n": -3, "t": True}),
            ('k = "\\u00e9\\"\\\\"\n', {"k": 'é"\\'}),
            ('k = []\n[x]\n[x.y]\n', {"k": [], "x": {"y": {}}}),
        ]
        for text, want in good:
            with self.subTest(text=text):
                self.assertEqual(gatekeeper_build_toml.loads(text), want)
                if tomllib is not None:
                    self.assertEqual(tomllib.loads(text), want)
        bad = ['k = """x"""\n', "a.b = 1\n", "[[t]]\n", "k = {a = 1}\n", "k = 1.5\n", 'k = "x" y\n',
               "k = 1\nk = 2\n", 'k = "open\n', "k = [1 2]\n"]
        for text in bad:
            with self.subTest(text=text), self.assertRaises(gatekeeper_build_toml.TomlError):
                gatekeeper_build_toml.loads(text)


if __name__ == "__main__":
    unittest.main()
