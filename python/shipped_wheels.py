"""Load Python modules from a downloaded wheel (vLLM, SGLang) without importing the package.

vLLM's and SGLang's package imports pull CUDA-only and server modules; their compressor kernels
need none of that. `load(dist, version, modules, shims)` finds `<dist>-<version>-*.whl` in the
wheel cache (`$PHASEKV_WHEELS`, else `target/wheels` under the repository; `.ci/run` fills it
with `pip download --no-deps`), extracts the wheel's `.py` files once next to it (`<wheel>.py/`), and imports the
named modules from there, unmodified. Package `__init__`s under `stub_prefixes` are replaced by
empty packages (so `vllm/__init__.py` and friends never run), and `shims` (module name -> dict of
attributes) stand in for the platform-detection modules: the adapters name exactly what they
replace. Nothing from a wheel is ever copied into the repository.
"""
import glob
import importlib
import importlib.abc
import importlib.machinery
import os
import shutil
import sys
import tempfile
import types
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wheel_dir():
    return os.environ.get("PHASEKV_WHEELS") or os.path.join(REPO, "target", "wheels")


def find_wheel(dist, version):
    """The path of `<dist>-<version>-*.whl` in the wheel cache, or SystemExit naming the fix."""
    pattern = os.path.join(wheel_dir(), f"{dist}-{version}-*.whl")
    found = sorted(glob.glob(pattern))
    if not found:
        raise SystemExit(f"no {dist} {version} wheel matches {pattern}: run "
                         f"`pip download --no-deps {dist}=={version} -d {wheel_dir()}` (or set PHASEKV_WHEELS)")
    return found[0]


def extract_sources(wheel):
    """Extract the wheel's .py files once into `<wheel>.py/`; return that folder. Tests run
    adapters in parallel, so the files go to a private folder first, renamed into place whole:
    a process never imports a half-written tree, and the loser of a race uses the winner's."""
    root = wheel + ".py"
    if os.path.isdir(root):
        return root
    tmp = tempfile.mkdtemp(prefix=os.path.basename(root) + ".", dir=os.path.dirname(root))
    try:
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(".py"):
                    z.extract(name, tmp)
        os.rename(tmp, root)
    except OSError:
        if not os.path.isdir(root):
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


class _EmptyPackage(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        pass


class _StubFinder(importlib.abc.MetaPathFinder):
    """Packages of `root` named by `stub(name)` import as empty packages (their __init__ skipped)."""

    def __init__(self, root, stub):
        self.root, self.stub = root, stub

    def find_spec(self, name, path, target=None):
        folder = os.path.join(self.root, *name.split("."))
        if not self.stub(name) or not os.path.isdir(folder):
            return None
        spec = importlib.machinery.ModuleSpec(name, _EmptyPackage(), is_package=True)
        spec.submodule_search_locations = [folder]
        return spec


def load(dist, version, modules, stub_prefixes, shims):
    """Import `modules` (dotted names) from the wheel's sources; returns them in order."""
    root = extract_sources(find_wheel(dist, version))
    top = modules[0].split(".")[0]
    if top in sys.modules and not getattr(sys.modules[top], "__phasekv_wheel__", False):
        raise RuntimeError(f"{top} is already imported from {sys.modules[top].__file__}; load the wheel in a fresh process")
    sys.path.insert(0, root)

    def stub(name):
        return name == top or any(name == p or name.startswith(p + ".") for p in stub_prefixes)

    sys.meta_path.insert(0, _StubFinder(root, stub))
    importlib.import_module(top).__phasekv_wheel__ = True
    for name, attrs in shims.items():
        importlib.import_module(name.rsplit(".", 1)[0])
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        module.__phasekv_shim__ = True
        sys.modules[name] = module
    return [importlib.import_module(m) for m in modules]
