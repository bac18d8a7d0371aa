"""One TLS context for every HTTP client the process makes.

httpx builds a new `ssl.SSLContext` for each client and loads the whole CA bundle into it:
about 20 ms of CPU for every client. The model, moderation and transcript clients, attachment
downloads, the proxies' checks and `manage.py doctor` make their clients with this one
instead. An `SSLContext` may be shared by clients, event loops and threads; it is built on
first use, so ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` are read as httpx reads them.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()
