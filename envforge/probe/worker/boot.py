"""envforge's probe worker as one file: this module, with the package's sources in it.

envforge ships this file's text with ``SOURCES`` filled in (``envforge.probe.bundle``):
one text file, so every target takes it as it took the single-file worker (a file written
next to the spec, a file put into a container, a ConfigMap key, ``python -c SOURCE``).
Run, it imports the package from those sources in memory (nothing is written or
installed; the importer is on ``sys.meta_path`` only while the package imports) and runs
``driver.main``. Stdlib-only, Python 3.7 syntax.
"""

import importlib
import sys
from importlib.machinery import ModuleSpec

#: The package's name in the target: no module of the environment under test has it.
PACKAGE = "envforge_probe_worker"
#: Module within the package ("" for the package itself) -> its source.
SOURCES = {}  # filled in by envforge.probe.bundle


class SourceImporter:
    """Finds and loads the modules of one package from their sources (a meta path finder
    and its loader). ``get_source`` lets tracebacks show the lines (linecache)."""

    def __init__(self, package, sources):
        self.package = package
        self.names = {(package + "." + key if key else package): key for key in sources}
        self.sources = sources

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names:
            return None
        return ModuleSpec(
            fullname,
            self,
            origin=self.filename(fullname),
            is_package=self.is_package(fullname),
        )

    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module):
        exec(self.get_code(module.__name__), module.__dict__)

    def is_package(self, fullname):
        return fullname == self.package

    def get_source(self, fullname):
        if fullname not in self.names:
            raise ImportError(f"no module named {fullname!r} here", name=fullname)
        return self.sources[self.names[fullname]]

    def get_code(self, fullname):
        source = self.get_source(fullname)
        return compile(source, self.filename(fullname), "exec", dont_inherit=True)

    def filename(self, fullname):
        return "{}/{}.py".format(self.package, self.names[fullname] or "__init__")


def load(package=PACKAGE, sources=None):
    """Import every module of the package; {module within the package: module}."""
    importer = SourceImporter(package, SOURCES if sources is None else sources)
    sys.meta_path.insert(0, importer)
    try:
        return {key: importlib.import_module(name) for name, key in importer.names.items()}
    finally:
        sys.meta_path.remove(importer)


if __name__ == "__main__":
    load()["driver"].main(sys.argv)
