"""cdckit's own state beside the Spark checkpoint: small JSON documents (snapshot state, finished chunks,
watermarks, schema history), on a local or mounted path or in S3.

``cdckit.checkpoint.location`` may be a path or an ``s3://`` / ``s3a://`` URI. S3 goes through pyarrow's S3
filesystem: credentials come from the usual AWS chain (environment, profile, instance or pod role); an endpoint
other than AWS (MinIO, tests) from ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``. The Spark checkpoint itself is
written by Spark, which needs its own S3 support (hadoop-aws, as on EMR) for an S3 location.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from cdckit.fsutil import write_private


def join(location: str, *parts: str) -> str:
    """``location``/``parts``, keeping a URI's ``//`` intact."""
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


class StateStore:
    def __init__(self, location: str) -> None:
        self.location = location
        scheme, _, rest = location.partition("://")
        self.remote = bool(rest) and scheme in ("s3", "s3a")
        if self.remote:
            import pyarrow.fs as pafs

            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            kwargs: dict[str, Any] = {}
            if endpoint:
                scheme_part, _, host = endpoint.partition("://")
                kwargs.update(endpoint_override=host or endpoint, scheme=scheme_part if host else "https")
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if region:
                kwargs["region"] = region
            self._fs = pafs.S3FileSystem(**kwargs)
            self._root = rest.rstrip("/")

    def write_problem(self, prop: str) -> str | None:
        """Why a job could not write at this location (``prop`` names its property), checked without leaving anything
        behind; None when it can. A local path must be a folder the job may write, or be creatable in the nearest
        folder that exists; an S3 location is tried with a small object written and removed at once (what the job's
        role may do is known only by trying)."""
        if self.remote:
            probe = self._key(f".cdckit-write-check-{os.getpid()}-{id(self):x}")
            try:
                with self._fs.open_output_stream(probe) as stream:
                    stream.write(b"")
                self._fs.delete_file(probe)
            except Exception as exc:  # pyarrow's OSError subclasses carry S3's answer
                detail = " ".join(str(exc).split())[:300]
                return (f"{prop}={self.location} cannot be written ({detail}); check the bucket's name and region, "
                        f"and that the job's credentials may s3:PutObject and s3:DeleteObject there")
            return None
        import tempfile

        path = Path(os.path.abspath(self.location))
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            return (f"{prop}={self.location}: {existing} is a file, not a folder; choose a folder (it is created "
                    f"when missing)")
        try:  # tried, not judged from the mode bits: a read-only mount, an ACL or root squashing say no only then
            with tempfile.TemporaryDirectory(prefix=".cdckit-write-check-", dir=existing):
                pass
        except OSError as exc:
            where = "" if existing == path else f" ({existing}, where it would be created)"
            return (f"{prop}={self.location} cannot be written{where}: {exc.strerror or exc}; choose a folder the "
                    f"job may write, or give the job's user write access to it")
        return None

    def filesystem(self) -> tuple[Any, str]:
        """The pyarrow filesystem and root path of the location (for data files kept beside the state)."""
        if self.remote:
            return self._fs, self._root
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), os.path.abspath(self.location)

    def _key(self, relative: str) -> str:
        return f"{self._root}/{relative.strip('/')}"

    def _local(self, relative: str) -> Path:
        return Path(self.location) / relative

    def read_json(self, relative: str) -> Any | None:
        if not self.remote:
            path = self._local(relative)
            return json.loads(path.read_text()) if path.exists() else None
        import pyarrow.fs as pafs

        key = self._key(relative)
        if self._fs.get_file_info(key).type == pafs.FileType.NotFound:
            return None
        with self._fs.open_input_stream(key) as stream:
            return json.loads(stream.read())

    def write_json(self, relative: str, document: Any) -> None:
        """Replace the document whole (locally a private file: an exclusive temporary file renamed; one PUT in
        S3)."""
        data = json.dumps(document, indent=1)
        if not self.remote:  # 0600 in 0700 folders, never through a link (cdckit.fsutil)
            write_private(self._local(relative), data.encode())
            return
        with self._fs.open_output_stream(self._key(relative)) as stream:
            stream.write(data.encode())

    def list_json(self, folder: str) -> list[Any]:
        """Every ``*.json`` document in ``folder``, in name order."""
        if not self.remote:
            return [json.loads(p.read_text()) for p in sorted(self._local(folder).glob("*.json"))]
        import pyarrow.fs as pafs

        infos = self._fs.get_file_info(pafs.FileSelector(self._key(folder), allow_not_found=True))
        documents = []
        for info in sorted(infos, key=lambda i: i.path):
            if info.type == pafs.FileType.File and info.path.endswith(".json"):
                with self._fs.open_input_stream(info.path) as stream:
                    documents.append(json.loads(stream.read()))
        return documents

    def remove(self, folder: str) -> None:
        if not self.remote:
            shutil.rmtree(self._local(folder), ignore_errors=True)
            return
        import pyarrow.fs as pafs

        if self._fs.get_file_info(self._key(folder)).type != pafs.FileType.NotFound:
            self._fs.delete_dir(self._key(folder))

    def read_text(self, relative: str) -> str | None:
        if not self.remote:
            path = self._local(relative)
            return path.read_text() if path.exists() else None
        import pyarrow.fs as pafs

        key = self._key(relative)
        if self._fs.get_file_info(key).type == pafs.FileType.NotFound:
            return None
        with self._fs.open_input_stream(key) as stream:
            return bytes(stream.read()).decode()

    def modified_ms(self, relative: str) -> int | None:
        """When the file was last written (epoch milliseconds), or None when it does not exist."""
        if not self.remote:
            path = self._local(relative)
            return int(path.stat().st_mtime * 1000) if path.exists() else None
        info = self._fs.get_file_info(self._key(relative))
        return int(info.mtime.timestamp() * 1000) if info.mtime is not None else None

    def names(self, folder: str) -> list[str]:
        """The file names in ``folder``."""
        if not self.remote:
            path = self._local(folder)
            return sorted(p.name for p in path.iterdir()) if path.exists() else []
        import pyarrow.fs as pafs

        infos = self._fs.get_file_info(pafs.FileSelector(self._key(folder), allow_not_found=True))
        return sorted(info.base_name for info in infos)
