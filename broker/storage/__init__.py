"""The storage seam (see api.py): the interface, the real disk, the simulated one, and
the whole-file helpers built on the interface."""

from .api import FileHandle, FileSystem
from .files import read_file, write_atomically
from .real import REAL, RealFile, RealFileSystem
from .simulated import Fault, SimFile, SimulatedFileSystem

__all__ = ["FileHandle", "FileSystem", "read_file", "write_atomically", "REAL", "RealFile",
           "RealFileSystem", "Fault", "SimFile", "SimulatedFileSystem"]
