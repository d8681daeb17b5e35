"""Signed certificates: ed25519 keys, signatures and trust lists (through ``cryptography``).

A certificate's ``digest`` (see :mod:`envforge.publish.certificate`) proves integrity; a signature
says who issued it. The format:

* **private key** ``envforge.key``: PEM, PKCS#8, unencrypted (``-----BEGIN PRIVATE KEY-----``),
  mode 0600, written by ``envforge keys generate -o DIR`` and never overwritten;
* **public key** ``envforge.pub``: one line ``envforge-ed25519 <base64 of the 32 raw key
  bytes> [NAME...]``. A *trust file* (``verify --trust FILE``, ``ENVFORGE_TRUSTED_KEYS``)
  holds one or more such lines; blank lines and ``#`` comments are ignored; NAME (the
  rest of the line) is how the key is shown (``matrix``, ``verify``);
* **fingerprint** ``sha256:<hex>``: the sha256 of the 32 raw public key bytes;
* **signature**: the certificate's JSON gains the field ``signature``::

      {"scheme": "envforge-ed25519/1", "key": "<fingerprint>",
       "public_key": "<base64 raw public key>", "value": "<base64 ed25519 signature>"}

  over the bytes ``envforge.certificate/1 signature\\n<digest>`` (the digest is the
  sha256 of the certificate's canonical JSON without ``digest`` and ``signature``, so the
  signature covers every other field). The field is not part of the digest: an unsigned
  certificate's digest is what it always was, and signing does not change it.

The embedded public key lets anyone check that the signature matches (``publish
--require-signed``, ``matrix``); whether the key is *trusted* is only decided against a
trust list (``verify --trust``).

The private key is held by :class:`SigningKey`, whose ``repr`` names only the fingerprint:
it is never written anywhere but ``envforge.key``, and no error message quotes it.
This module imports ``cryptography``: commands that never sign or check a signature
import it only when they need it, so they stay light.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from envforge.core.fsutil import check_folder_target, read_limited, read_reason
from envforge.errors import CertificationFailed, InvalidInput

SCHEME = "envforge-ed25519/1"
PUBLIC_PREFIX = "envforge-ed25519"
KEY_NAME = "envforge.key"
PUB_NAME = "envforge.pub"
ENV_TRUSTED_KEYS = "ENVFORGE_TRUSTED_KEYS"
_CONTEXT = b"envforge.certificate/1 signature\n"
#: Bytes a private key file may have (a PEM ed25519 key is 119).
MAX_KEY_FILE_BYTES = 64 * 1024
#: Bytes a trust file may have (one line of about 130 bytes per key).
MAX_TRUST_FILE_BYTES = 1024 * 1024


def signed_message(digest: str) -> bytes:
    """The bytes a certificate signature is made over."""
    return _CONTEXT + digest.encode("ascii")


def fingerprint(raw_public: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw_public).hexdigest()


def short(fp: str) -> str:
    """``sha256:1a2b3c4d5e6f7a8b`` (16 hex digits): how a fingerprint is shown."""
    return fp[:23]


@dataclass(frozen=True)
class PublicKey:
    """An ed25519 public key and the name its file gives it."""

    raw: bytes
    name: str = ""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.raw)

    @property
    def label(self) -> str:
        """``NAME (sha256:…)`` or the short fingerprint alone."""
        fp = short(self.fingerprint)
        return f"{self.name} ({fp})" if self.name else fp

    def to_line(self) -> str:
        text = f"{PUBLIC_PREFIX} {base64.b64encode(self.raw).decode('ascii')}"
        return f"{text} {self.name}" if self.name else text

    def pem(self) -> str:
        """The key as PEM SubjectPublicKeyInfo (what cosign's ``--key`` reads)."""
        key = Ed25519PublicKey.from_public_bytes(self.raw)
        data: bytes = key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return data.decode("ascii")

    def verify(self, signature: bytes, message: bytes) -> bool:
        key = Ed25519PublicKey.from_public_bytes(self.raw)
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class SigningKey:
    """A loaded private key. Its repr and str name the public fingerprint only."""

    public: PublicKey
    _key: Ed25519PrivateKey = field(repr=False, compare=False)

    def __repr__(self) -> str:
        return f"SigningKey({self.public.fingerprint})"

    __str__ = __repr__

    def sign(self, message: bytes) -> bytes:
        return bytes(self._key.sign(message))

    def signature_for(self, digest: str) -> dict[str, str]:
        """The certificate's ``signature`` field for ``digest``."""
        return {
            "scheme": SCHEME,
            "key": self.public.fingerprint,
            "public_key": base64.b64encode(self.public.raw).decode("ascii"),
            "value": base64.b64encode(self.sign(signed_message(digest))).decode("ascii"),
        }


# --------------------------------------------------------------------------- files


def generate(folder: Path, name: str = "") -> tuple[Path, Path]:
    """Write ``folder/envforge.key`` (0600) and ``folder/envforge.pub``; refuse (exit 2)
    when either exists. Returns both paths."""
    name = " ".join(name.split())
    key_path, pub_path = folder / KEY_NAME, folder / PUB_NAME
    for path in (key_path, pub_path):
        if path.exists() or path.is_symlink():
            raise InvalidInput(
                f"{path} already exists; keys are never overwritten",
                hint="choose another -o folder, or move the old keys away first",
            )
    check_folder_target(folder, setting="-o")  # a file, device or FIFO there: one line, exit 2
    folder.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    public = PublicKey(raw, name)
    _write_new(key_path, pem, 0o600)
    try:
        _write_new(pub_path, (public.to_line() + "\n").encode("ascii"), 0o644)
    except BaseException:
        key_path.unlink(missing_ok=True)
        raise
    return key_path, pub_path


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` (never replacing anything) with ``mode`` from the start."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        os.fchmod(fd, mode)  # the umask does not apply
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


def load_signing_key(path: Path, *, setting: str = "--signing-key") -> SigningKey:
    """The private key in ``path``; :class:`InvalidInput` (one line, naming the file, never
    its content) when it cannot be read or is not an ed25519 PEM key."""
    text = str(path)
    if "\n" in text or "PRIVATE KEY" in text or len(text) > 4096:
        # The key itself where its path belongs (a CI secret put into the variable): say
        # so without echoing a byte of it.
        raise InvalidInput(
            f"{setting} holds key material, not a path to a key file (not shown here)",
            hint="write the key to a file only you can read (mode 0600) and pass its path",
        )
    try:
        data = read_limited(path, MAX_KEY_FILE_BYTES)
    except OSError as exc:  # a FIFO or /dev/zero is refused at once, never read
        raise InvalidInput(
            f"{setting} {path}: cannot read: {read_reason(exc, path)}",
            hint="name the envforge.key written by envforge keys generate",
        ) from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, binascii.Error):
        key = None
    except Exception:
        key = None

    if key is None or not isinstance(key, Ed25519PrivateKey):
        raise InvalidInput(
            f"{setting} {path}: not an unencrypted ed25519 private key (PEM, PKCS#8)",
            hint="generate one with envforge keys generate -o DIR",
        )
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return SigningKey(PublicKey(bytes(raw)), key)


def parse_public_line(line: str, *, source: str) -> PublicKey:
    words = line.split()
    if len(words) < 2 or words[0] != PUBLIC_PREFIX:
        raise InvalidInput(
            f"{source}: not an envforge public key (expected '{PUBLIC_PREFIX} BASE64 [NAME]')",
            hint="name the envforge.pub written by envforge keys generate",
        )
    try:
        raw = base64.b64decode(words[1], validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise InvalidInput(
            f"{source}: the key is not 32 bytes of base64",
            hint="copy the line from envforge.pub unchanged",
        )
    return PublicKey(raw, " ".join(words[2:]))


@dataclass(frozen=True)
class TrustList:
    """Trusted public keys by fingerprint (empty: no trust configured)."""

    keys: Mapping[str, PublicKey] = field(default_factory=dict)
    sources: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.keys)

    def get(self, fp: str) -> PublicKey | None:
        return self.keys.get(fp)

    def name_of(self, fp: str) -> str:
        found = self.keys.get(fp)
        return found.name if found is not None else ""


def load_trust(paths: Iterable[Path], *, setting: str = "--trust") -> TrustList:
    """Every key in the trust files (one-line errors naming file and line)."""
    keys: dict[str, PublicKey] = {}
    sources: list[str] = []
    for path in paths:
        try:
            text = read_limited(path, MAX_TRUST_FILE_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = read_reason(exc, path) if isinstance(exc, OSError) else "not UTF-8 text"
            raise InvalidInput(
                f"{setting} {path}: cannot read: {reason}",
                hint="name an envforge.pub file (or a file of such lines)",
            ) from None
        count = 0
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key = parse_public_line(line, source=f"{setting} {path}:{number}")
            keys.setdefault(key.fingerprint, key)
            count += 1
        if count == 0:
            raise InvalidInput(
                f"{setting} {path}: holds no public key",
                hint="name an envforge.pub file (or a file of such lines)",
            )
        sources.append(str(path))
    return TrustList(keys, tuple(sources))


def trust_paths(given: Sequence[Path], environ: Mapping[str, str] | None = None) -> list[Path]:
    """``--trust`` files, else ``ENVFORGE_TRUSTED_KEYS`` (``os.pathsep``-separated)."""
    if given:
        return list(given)
    env = os.environ if environ is None else environ
    return [Path(p) for p in env.get(ENV_TRUSTED_KEYS, "").split(os.pathsep) if p.strip()]


# --------------------------------------------------------------------------- checking

SignatureState = Literal["unsigned", "valid", "invalid"]


@dataclass(frozen=True)
class SignatureCheck:
    """What a certificate's signature says (``state``), and who made it."""

    state: SignatureState
    key: str = ""  # the fingerprint the signature names
    reason: str = ""

    @property
    def signed(self) -> bool:
        return self.state != "unsigned"


def signature_field(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    value = data.get("signature")
    return value if isinstance(value, Mapping) else None


def check_signature(data: Mapping[str, Any]) -> SignatureCheck:
    """Check a certificate's signature against the public key it carries (not against a
    trust list: that is :func:`require_trusted`)."""
    sig = signature_field(data)
    if sig is None:
        return SignatureCheck("unsigned")
    fp = str(sig.get("key", ""))
    if sig.get("scheme") != SCHEME:
        return SignatureCheck("invalid", fp, f"unknown signature scheme {sig.get('scheme')!r}")
    try:
        raw = base64.b64decode(str(sig.get("public_key", "")), validate=True)
        value = base64.b64decode(str(sig.get("value", "")), validate=True)
    except (binascii.Error, ValueError):
        return SignatureCheck("invalid", fp, "the signature or its key is not base64")
    if len(raw) != 32 or fingerprint(raw) != fp:
        return SignatureCheck("invalid", fp, "the public key does not match its fingerprint")
    if not PublicKey(raw).verify(value, signed_message(str(data.get("digest", "")))):
        return SignatureCheck("invalid", fp, "the signature does not match the certificate")
    return SignatureCheck("valid", fp)


def require_trusted(data: Mapping[str, Any], trust: TrustList, *, what: str) -> PublicKey:
    """The trusted key that signed the certificate ``data``; :class:`CertificationFailed`
    (exit 1) when it is unsigned, signed by a key not in ``trust``, or the signature does
    not match (checked with the *trusted* key, not the one the certificate carries)."""
    sig = signature_field(data)
    if sig is None:
        raise CertificationFailed(
            f"{what}: the certificate is not signed, and trusted keys are required",
            hint="certify it with --signing-key (or ENVFORGE_SIGNING_KEY)",
        )
    fp = str(sig.get("key", ""))
    key = trust.get(fp)
    if key is None:
        raise CertificationFailed(
            f"{what}: the certificate is signed by {short(fp) or 'an unnamed key'}, "
            f"which is not among the {len(trust.keys)} trusted key(s)",
            hint="add its envforge.pub to --trust / ENVFORGE_TRUSTED_KEYS if you trust it",
        )
    try:
        value = base64.b64decode(str(sig.get("value", "")), validate=True)
    except (binascii.Error, ValueError):
        value = b""
    if not key.verify(value, signed_message(str(data.get("digest", "")))):
        raise CertificationFailed(
            f"{what}: the signature does not match the certificate (key {key.label})",
            hint="the certificate or its signature was altered; do not use this image",
        )
    return key


def load_signer(path: Path | None, *, say: Callable[[str], None]) -> SigningKey | None:
    """The ``--signing-key`` / ``ENVFORGE_SIGNING_KEY`` key (None: no path); a key other
    users can read is said as a warning."""
    if path is None or not str(path):
        return None
    key = load_signing_key(path, setting="--signing-key (or ENVFORGE_SIGNING_KEY)")
    try:
        loose = path.stat().st_mode & 0o077
    except OSError:
        loose = 0
    if loose:
        say(f"warning: signing key {path} can be read by other users (chmod 600 {path})")
    return key
