"""setuptools' build plus one file: ``determined_lite_alias.pth`` at the root of site-packages
(regular and editable installs), which lets ``import determined`` find det-lite's alias in any
process of the environment when no real Determined is installed (``_determined_lite_alias``)."""

import os
import shutil
from typing import Any, List

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "determined_lite_alias.pth"
HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPy(build_py):
    """A wheel: the .pth beside the packages."""

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> List[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


class EditableWheel(editable_wheel):
    """``pip install -e``: the editable wheel holds only setuptools' own finder; add the .pth."""

    def _run_build_commands(self, dist_name: str, unpacked_wheel: Any, *args: Any) -> Any:
        result = super()._run_build_commands(dist_name, unpacked_wheel, *args)
        shutil.copyfile(os.path.join(HERE, PTH), os.path.join(str(unpacked_wheel), PTH))
        return result


setup(cmdclass={"build_py": BuildPy, "editable_wheel": EditableWheel})
