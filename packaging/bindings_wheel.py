"""Writes llama-cpp-python's Python bindings, without the llama.cpp it builds, as a pure wheel
(``llama_cpp_python-VERSION-py3-none-any.whl``), for a Python where the package is only needed to be bundled
with llama.cpp libraries built elsewhere: packaging/build --target linux-arm64 installs it into the arm64
Python that runs PyInstaller, where compiling llama.cpp under emulation would take an hour for libraries the
bundle replaces anyway (packaging/build-llama-cpp-portable's).

    python packaging/bindings_wheel.py SDIST OUT_DIR      prints the wheel's path
"""

import base64
import hashlib
import sys
import tarfile
import zipfile
from pathlib import Path


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(sdist: Path, out_dir: Path) -> Path:
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile() and "/" in m.name}
        files = {
            name: tar.extractfile(member).read()  # type: ignore[union-attr]
            for name, member in members.items()
            if name.startswith("llama_cpp/") and "/lib/" not in name and not name.endswith(".pyc")
        }
        metadata = tar.extractfile(members["PKG-INFO"]).read()  # type: ignore[union-attr]
    version = next(
        line.split(":", 1)[1].strip() for line in metadata.decode().splitlines() if line.startswith("Version:")
    )
    info = f"llama_cpp_python-{version}.dist-info"
    files[f"{info}/METADATA"] = metadata
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: localinfer\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    records = [record_line(name, data) for name, data in sorted(files.items())]
    records.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(records) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"llama_cpp_python-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), Path(sys.argv[2])))
