import pathlib
import sys

# The tests' launcher (dist.py) and the example they train with.
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
