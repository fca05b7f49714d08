"""The build's one non-declarative part: kop.pulsar._native, the C loops of the Kafka <-> Pulsar conversion.

Everything else is in pyproject.toml. ``pip install -e '.[test]'`` (scripts/setup) compiles it with the system's C
compiler; a checkout that is not installed builds it in place with ``python setup.py build_ext --inplace``.
The extension is optional at run time (kop/pulsar/convert.py falls back to its Python loops, with a log line), so a
machine without a compiler still installs: the failed build is reported, not fatal. Under CI a test insists on it.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that reports a failed compile instead of failing the install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python headers
            print(f"WARNING: kop.pulsar._native was not built ({exc}); the Python conversion is used")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"WARNING: {ext.name} was not built ({exc}); the Python conversion is used")


setup(
    ext_modules=[Extension("kop.pulsar._native", ["kop/pulsar/_native.c"])],
    cmdclass={"build_ext": OptionalBuildExt},
)
