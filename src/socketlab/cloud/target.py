"""Which cloud to talk to: AWS or any AWS-compatible endpoint (moto, Spinifex, ...).

Profile, region and endpoint URL come from explicit settings first, then the environment
(AWS_PROFILE, AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_<SERVICE> / AWS_ENDPOINT_URL),
then the profile's own config. Nothing here assumes the real AWS. Credentials are never read
or passed by socketlab: boto3 finds them itself (environment, profile, instance role), so no
credential value can end up in a task result, a log line or an error message of ours.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from socketlab.errors import CloudError


@dataclass(frozen=True)
class CloudTarget:
    region: str
    profile: str | None = None
    endpoint_url: str | None = None  #: one URL for every service; None = per-service env/default

    def describe(self) -> dict[str, Any]:
        """What the target is, safe to print (no credentials)."""
        return {"region": self.region, "profile": self.profile, "endpoint_url": self.endpoint_url}

    def session(self) -> Any:
        import boto3  # imported late: the pure planning code must not need it
        import botocore.exceptions

        try:
            return boto3.session.Session(profile_name=self.profile, region_name=self.region)
        except botocore.exceptions.ProfileNotFound:
            raise _no_profile(self.profile) from None

    def client(self, service: str) -> Any:
        import botocore.exceptions
        from botocore.config import Config

        url = self.endpoint_url or _service_endpoint_env(service)
        cfg = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10)
        try:
            return self.session().client(service, endpoint_url=url, config=cfg)
        except botocore.exceptions.InvalidRegionError:
            raise CloudError(
                f"aws_region {self.region!r}: expected a region name such as us-east-1"
            ) from None
        except (botocore.exceptions.BotoCoreError, ValueError) as exc:
            raise api_error(f"making the {service} client", exc) from None

    def service_url(self, service: str) -> str:
        """The URL a client of that service talks to, wherever it came from (the setting, the
        environment, the profile's endpoint_url, or the cloud's default); no request is made."""
        return self.client(service).meta.endpoint_url


def _service_endpoint_env(service: str) -> str | None:
    key = "AWS_ENDPOINT_URL_" + service.upper().replace("-", "_")
    return os.environ.get(key) or os.environ.get("AWS_ENDPOINT_URL") or None


def resolve_target(
    region: str | None = None,
    profile: str | None = None,
    endpoint_url: str | None = None,
    *,
    source: str = "settings",
) -> CloudTarget:
    """Explicit values win, then the environment; the region is required (no silent default)."""
    profile = profile or os.environ.get("AWS_PROFILE") or None
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region and profile:
        region = _profile_region(profile)
    if not region:
        raise CloudError(
            f"{source}: aws_region is not set: pass it (-e socketlab_ec2_aws_region=... / "
            "--region) or set AWS_REGION"
        )
    endpoint_url = endpoint_url or None
    if endpoint_url and not endpoint_url.startswith(("http://", "https://")):
        raise CloudError(
            f"{source}: aws_endpoint_url {endpoint_url!r} is not a URL (expected http(s)://host:port)"
        )
    return CloudTarget(region=region, profile=profile, endpoint_url=endpoint_url)


def _profile_region(profile: str) -> str | None:
    import boto3
    import botocore.exceptions

    try:
        return boto3.session.Session(profile_name=profile).region_name
    except botocore.exceptions.ProfileNotFound:
        raise _no_profile(profile) from None


def _no_profile(profile: str | None) -> CloudError:
    config = os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"
    return CloudError(f"aws_profile {profile!r}: no such profile in {config}")


def api_error(action: str, exc: Exception) -> CloudError:
    """A one-line CloudError from a botocore error (its message carries no credentials)."""
    code = (
        getattr(exc, "response", {}).get("Error", {}).get("Code")
        if hasattr(exc, "response")
        else None
    )
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    error = CloudError(f"{action} failed: {code + ': ' if code else ''}{text}")
    error.code = code  # type: ignore[attr-defined]  # capacity errors are told apart by it
    return error
