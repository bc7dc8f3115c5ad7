"""Validation and escaping of names that end up in URLs, paths and Kubernetes objects."""

from __future__ import annotations

import hashlib
import re

from cube_jupyter.errors import InvalidInput, quote

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX = 63
# A DNS-1123 label, in words a person acts on: the cause first, the technical term last.
LABEL_CHARS = "lower-case letters, digits and '-', starting and ending with a letter or digit"
LABEL_RULE = f"use {LABEL_CHARS}"
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A label value, or the name part of a label key ("qualified name").
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def validate_dns_label(value: object, field: str, max_length: int = DNS1123_LABEL_MAX) -> str:
    """Return `value` if it is a DNS-1123 label no longer than `max_length`, else raise naming `field`."""
    if value is None or value == "":
        raise InvalidInput(f"{field} is required: {LABEL_RULE}", field=field)
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text, got {quote(value)}: {LABEL_RULE}", field=field)
    if len(value) > max_length:
        raise InvalidInput(
            f"{field} {quote(value)} is {len(value)} characters long; the limit is {max_length}",
            field=field,
        )
    if not DNS1123_LABEL.match(value):
        raise InvalidInput(
            f"{field} {quote(value)} may only have {LABEL_CHARS} (a DNS-1123 label)", field=field
        )
    return value


def validate_qualified_name(value: object, field: str, *, prefix_required: bool = False) -> str:
    """A label key or extended resource name: `[prefix/]name`, the prefix a DNS subdomain."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be a non-empty string, got {quote(value)}", field=field)
    prefix, slash, name = value.rpartition("/")
    ok = bool(LABEL_NAME.match(name)) and len(name) <= DNS1123_LABEL_MAX
    if slash:
        ok = ok and bool(DNS1123_SUBDOMAIN.match(prefix)) and len(prefix) <= 253
    elif prefix_required:
        ok = False
    if not ok:
        form = "'domain/name'" if prefix_required else "'[domain/]name'"
        raise InvalidInput(
            f"{field} {quote(value)} is not a Kubernetes qualified name {form} (name: up to 63 letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit)",
            field=field,
        )
    return value


def validate_label_value(value: object, field: str) -> str:
    """A label value: empty, or up to 63 letters, digits, '-', '_', '.' with alphanumeric ends."""
    if not isinstance(value, str) or (
        value and (len(value) > DNS1123_LABEL_MAX or not LABEL_NAME.match(value))
    ):
        raise InvalidInput(f"{field} {quote(value)} is not a valid Kubernetes label value", field=field)
    return value


# The escaped form of a user name: its kept part, then a digest of the raw name. Raw names that already
# look like this are escaped too, so a chosen raw name can never equal another user's escaped one.
SLUG_KEEP = 40
SLUG_DIGEST = 12  # hex digits (48 bits): finding a second name with the same digest is impractical
MAX_SLUG_LENGTH = SLUG_KEEP + 1 + SLUG_DIGEST
_ESCAPED_TAIL = re.compile(rf"-[0-9a-f]{{{SLUG_DIGEST}}}$")


def kubeflow_username(username: str) -> str:
    """A user name as Kubeflow spells it in profile names (user@example.com → user-example-com, the
    default profile `kubeflow-user-example-com`): lower case, each run of characters other than a-z and
    0-9 one '-'. Unlike `user_slug` it has no length limit and two names can share it (a.b@x, a-b@x)."""
    return re.sub(r"[^a-z0-9]+", "-", username.lower()).strip("-")


def user_slug(username: str) -> str:
    """A DNS-1123 label for a user name, stable and collision-free, at most MAX_SLUG_LENGTH long.

    "alice" stays "alice"; "Alice@Example.com" becomes "alice-example-com-" plus a digest of the
    original. A name kept as-is never ends in "-<digest>", so it cannot collide with an escaped one;
    two escaped names collide only if their digests do.
    """
    if not username:
        raise InvalidInput("user name is empty", field="user")
    slug = kubeflow_username(username)
    if slug == username and len(slug) <= SLUG_KEEP and not _ESCAPED_TAIL.search(slug):
        return slug
    digest = hashlib.sha256(username.encode()).hexdigest()[:SLUG_DIGEST]
    slug = slug[:SLUG_KEEP].strip("-")
    return f"{slug}-{digest}" if slug else f"u-{digest}"


# The fields a namespace template may use: the escaped user name, and Kubeflow's spelling of it.
NAMESPACE_FIELDS = ("username", "username_kubeflow")
_NAMESPACE_FIELD = re.compile(r"\{(?:" + "|".join(NAMESPACE_FIELDS) + r")\}")


def namespace_from_template(template: str, username: str, field: str) -> str:
    """A user's namespace from `template` (`field` names the setting). `{username}` always gives a
    DNS label (checked at startup); `{username_kubeflow}` can give one too long or empty, which is
    InvalidInput naming the user, not a name the API would refuse."""
    namespace = template.format(username=user_slug(username), username_kubeflow=kubeflow_username(username))
    try:
        return validate_dns_label(namespace, "namespace")
    except InvalidInput as exc:
        raise InvalidInput(
            f"user {quote(username)} gets no valid namespace from {field} {quote(template)}: {exc.message}",
            field="user",
        ) from None


def namespace_pattern(template: str) -> re.Pattern[str]:
    """The namespaces `template` can produce: each field stands for any DNS label."""
    label = DNS1123_LABEL.pattern.strip("^$")
    parts = [re.escape(part) for part in _NAMESPACE_FIELD.split(template)]
    return re.compile("^" + f"(?:{label})".join(parts) + "$")
