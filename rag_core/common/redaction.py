"""Credentials out of URLs and text: what the product prints or stores never holds a password or a token.

A URL keeps everything but its secrets: the password of its user-info (`http://user:***@host:5000`; the user
name stays, to say who connects) and the values of secret-looking parameters of its query, and of a query
in its fragment (`?token=***`, `X-Amz-Signature=***`, `sig=***` ...). `redact_urls` does the same to every
URL inside a text (an error message, a traceback, a log line).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

# a query parameter whose name (lowercase, letters and digits only) holds one of these carries a secret:
# access_token, X-Amz-Security-Token, X-Amz-Signature, X-Amz-Credential, client_secret, password, api_key ...
_SECRET_PARTS = (
    "token", "password", "passwd", "secret", "signature", "credential", "authorization", "apikey",
    "accesskey", "privatekey", "accountkey", "sharedkey", "signingkey", "sessionkey", "subscriptionkey",
)  # fmt: skip
# ... or is one of these exactly (Azure's SAS signature `sig`, `pwd`, `auth`, an OAuth `code` ...)
_SECRET_NAMES = {"key", "sig", "pwd", "pass", "auth", "code", "session", "sessionid", "jwt"}
# ... or ends with `key`, unless it names a sort or lookup key (MLflow's `orderByKey`, Dagster's `partitionKey`,
# MLflow's `viewStateShareKey`: the name of an experiment tag holding a view, not a share link's token)
_KEY_NOT_SECRET = (
    "bykey",
    "sortkey",
    "partitionkey",
    "assetkey",
    "runkey",
    "groupkey",
    "cachekey",
    "viewstatesharekey",
)

# name=value in a query, a fragment's query or a path's `;` parameters: the value up to the next separator
_PARAM = re.compile(r"(?P<pre>[?&;#])(?P<name>[^=&;#?/\s]+)=(?P<value>[^&;#\s]*)")
# a URL inside free text: a scheme, `://`, then anything up to white space, a quote or a bracket
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")


def is_secret_param(name: str) -> bool:
    """Whether a query parameter of this name carries a secret."""
    name = re.sub(r"[^a-z0-9]", "", unquote(name).lower())
    if name in _SECRET_NAMES or any(part in name for part in _SECRET_PARTS):
        return True
    return name.endswith("key") and not name.endswith(_KEY_NOT_SECRET)


def _redact_params(text: str) -> str:
    def mask(m: re.Match) -> str:
        if not m["value"] or not is_secret_param(m["name"]):
            return m[0]
        return f"{m['pre']}{m['name']}={MASK}"

    return _PARAM.sub(mask, text)


def redact_url(url: str | None) -> str | None:
    """`url` with its user-info password and the values of its secret-looking query parameters replaced by
    ***, everything else as it was (None stays None; a text that is no URL gets only its parameters
    scrubbed)."""
    if not url:
        return url
    if "://" not in url or not re.match(r"[A-Za-z][A-Za-z0-9+.\-]*://", url):
        return _redact_params(url)
    head, rest = url.split("://", 1)
    # the authority as urlsplit finds it (up to the first / ? #), found by hand: a URL urlsplit refuses
    # (a bad IPv6 host) still has its password masked
    cut = re.search(r"[/?#]", rest)
    netloc, tail = (rest[: cut.start()], rest[cut.start() :]) if cut else (rest, "")
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    return f"{head}://{netloc}{_redact_params(tail)}"


def redact_urls(text: str) -> str:
    """`text` with every URL in it redacted (redact_url): its passwords and secret query values ***."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m[0]), text)


def url_secrets(url: str | None) -> list[str]:
    """The secrets a URL holds (its password and secret query values, as written and decoded): what must
    never be found elsewhere either, e.g. a password a library echoes without its URL."""
    if not url or "://" not in url:
        return []
    secrets = []
    authority = re.split(r"[/?#]", url.split("://", 1)[1], maxsplit=1)[0]  # by hand: urlsplit refuses some
    if "@" in authority and ":" in (userinfo := authority.rsplit("@", 1)[0]):
        secrets.append(userinfo.split(":", 1)[1])
    for m in _PARAM.finditer(url.split("://", 1)[1]):
        if m["value"] and is_secret_param(m["name"]):
            secrets.append(m["value"])
    return sorted({v for s in secrets for v in (s, unquote(s)) if v})
