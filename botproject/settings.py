"""Django settings.

The environment is read here and nowhere else, through the typed readers in ``botproject.env``;
a bad value stops start-up with ImproperlyConfigured naming the variable. README.md lists every
variable with its default.
"""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from botproject.env import (
    env_bool,
    env_choice,
    env_database,
    env_int,
    env_list,
    env_origin_list,
    env_port,
    env_positive_float,
    env_refuse_renamed,
    env_str,
    env_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

# --- Core -------------------------------------------------------------------------------------

DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off "
            "(set DJANGO_DEBUG=1 for local development)"
        )
    SECRET_KEY = "insecure-development-key-do-not-use-in-production"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

# --- Deployment behind HTTPS ------------------------------------------------------------------
# Cookies are Secure whenever DEBUG is off. HSTS, the HTTPS redirect and trusting the proxy's
# X-Forwarded-Proto are opt-in: each is right only once HTTPS really reaches the site, and a
# wrong HSTS header locks browsers out for its whole max-age. `manage.py check --deploy` says
# which of them are still off.

SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0, minimum=0, maximum=2 * 365 * 86400)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
if env_bool("DJANGO_SECURE_PROXY_SSL_HEADER", False):
    # Only behind a proxy that sets X-Forwarded-Proto itself and strips it from clients.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = env_origin_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.discord",
    "personas",
    "chat",
    "accounts",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "botproject.urls"
WSGI_APPLICATION = "botproject.wsgi.application"
ASGI_APPLICATION = "botproject.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.access.roles",
                "accounts.context.login_options",
            ],
        },
    },
]

# --- Data -------------------------------------------------------------------------------------

DATABASES = {"default": env_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}")}

# The embedded default, SQLite, is written from several threads at once (the worker's intake,
# its channel loops, daphne, Celery). SQLite allows one writer at a time; these settings make
# the others wait their turn instead of failing with "database is locked":
# - WAL: readers never block the writer nor the writer the readers;
# - a busy timeout (seconds): a writer waits up to that long for the lock;
# - IMMEDIATE transactions: a transaction takes the write lock when it begins. A deferred one
#   (SQLite's default) reads first and fails at once, without waiting, when it later needs to
#   write while another connection wrote in between.
SQLITE_BUSY_TIMEOUT = 30
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "timeout": SQLITE_BUSY_TIMEOUT,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", schemes=("redis", "rediss", "unix"))

# channels_redis waits in BZPOPMIN for up to 5 s per receive (RedisChannelLayer.brpop_timeout)
# and then waits again. redis-py 8 reads with a 5 s socket timeout by default, so every idle
# receive ended in TimeoutError and a reconnect. The layer's connections therefore have no read
# timeout (redis-py 7's default): a blocking receive ends by BZPOPMIN's own timeout, and a dead
# connection is found by TCP keepalive, which redis-py 8 turns on for TCP connections (idle 30 s,
# then 3 probes 5 s apart). A read timeout longer than 5 s would also stop the errors, but on
# Python 3.11 redis-py then wraps every send in asyncio.wait_for, which can swallow the
# cancellation of a waiting receive, so a listener or consumer could not be stopped.
CHANNEL_LAYER_CONNECT_TIMEOUT = 5.0
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [
                {
                    "address": REDIS_URL,
                    "socket_timeout": None,
                    "socket_connect_timeout": CHANNEL_LAYER_CONNECT_TIMEOUT,
                }
            ],
            # One process's sockets share one Redis list: the default 100 waiting messages
            # would drop events for a dashboard watching more than 100 busy channels.
            "capacity": 1000,
        },
    },
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Short-term memory maintenance: how often beat looks for due memories, and how long a channel
# must have been quiet (no reply of the persona) before its memory is refreshed in the background.
env_refuse_renamed(
    {
        "STM_MAINTENANCE_SECONDS": "SHORT_TERM_MEMORY_MAINTENANCE_SECONDS",
        "STM_IDLE_SECONDS": "SHORT_TERM_MEMORY_IDLE_SECONDS",
    }
)
SHORT_TERM_MEMORY_MAINTENANCE_SECONDS = env_positive_float(
    "SHORT_TERM_MEMORY_MAINTENANCE_SECONDS", 300.0
)
SHORT_TERM_MEMORY_IDLE_SECONDS = env_positive_float("SHORT_TERM_MEMORY_IDLE_SECONDS", 600.0)
# Retention of the bot's records, in days (pruned hourly by Celery beat, in bounded batches).
TURN_RETENTION_DAYS = env_positive_float("TURN_RETENTION_DAYS", 30.0)
MESSAGE_INDEX_RETENTION_DAYS = env_positive_float("MESSAGE_INDEX_RETENTION_DAYS", 90.0)
DEDUP_RETENTION_DAYS = env_positive_float("DEDUP_RETENTION_DAYS", 7.0)
# What the bot worker keeps in memory, each bounded (least recently used dropped first): history
# windows per channel, warm contexts per (channel, persona), and who spoke the newest messages
# (the persona names of its deliveries, proxied members' names).
WORKER_WINDOW_CHANNELS = env_int("WORKER_WINDOW_CHANNELS", 1000, minimum=1)
WORKER_WARM_CONTEXTS = env_int("WORKER_WARM_CONTEXTS", 2000, minimum=0)
WORKER_RECENT_MESSAGES = env_int("WORKER_RECENT_MESSAGES", 5000, minimum=1)
# Slash commands are synced at start as guild commands of every configured guild (they appear at
# once); with DISCORD_GLOBAL_COMMANDS=1 as global commands instead (every guild, and Discord may
# take a while to show changes).
DISCORD_GLOBAL_COMMANDS = env_bool("DISCORD_GLOBAL_COMMANDS", False)

# Long-term memory: bounds per scope (TomoriBot's figures by default) and recall.
MEMORY_PERSONAL_LIMIT = env_int("MEMORY_PERSONAL_LIMIT", 30, minimum=0)
MEMORY_PERSONAL_MAX_CHARS = env_int("MEMORY_PERSONAL_MAX_CHARS", 256, minimum=1, maximum=2000)
MEMORY_GUILD_LIMIT = env_int("MEMORY_GUILD_LIMIT", 50, minimum=0)
MEMORY_GUILD_MAX_CHARS = env_int("MEMORY_GUILD_MAX_CHARS", 512, minimum=1, maximum=2000)
MEMORY_PERSONA_LIMIT = env_int("MEMORY_PERSONA_LIMIT", 50, minimum=0)
MEMORY_RECALL_K = env_int("MEMORY_RECALL_K", 6, minimum=0, maximum=50)
MEMORY_RECALL_MIN_SCORE_PERCENT = env_int(
    "MEMORY_RECALL_MIN_SCORE_PERCENT", 10, minimum=0, maximum=100
)
MEMORY_RECALL_RELATIVE_PERCENT = env_int(
    "MEMORY_RECALL_RELATIVE_PERCENT", 70, minimum=0, maximum=100
)
"""A memory is shown only when it scores at least this share of the turn's best."""
MEMORY_RECALL_VECTOR_PERCENT = env_int("MEMORY_RECALL_VECTOR_PERCENT", 60, minimum=0, maximum=100)
"""The vector similarity's share of the hybrid score (the keyword one has the rest)."""
MEMORY_RECALL_BUDGET_PERCENT = env_int("MEMORY_RECALL_BUDGET_PERCENT", 10, minimum=0, maximum=50)
DOCUMENT_MAX_BYTES = env_int("DOCUMENT_MAX_BYTES", 2 * 1024 * 1024, minimum=1)
MEMORY_EMBED_SECONDS = env_positive_float("MEMORY_EMBED_SECONDS", 300.0)
MEMORY_EXTRACTION_SECONDS = env_positive_float("MEMORY_EXTRACTION_SECONDS", 300.0)
MEMORY_EXTRACTION_QUIET_SECONDS = env_int("MEMORY_EXTRACTION_QUIET_SECONDS", 600, minimum=0)
MEMORY_EXTRACTION_MIN_MESSAGES = env_int("MEMORY_EXTRACTION_MIN_MESSAGES", 4, minimum=1)
MEMORY_DUPLICATE_SIMILARITY_PERCENT = env_int(
    "MEMORY_DUPLICATE_SIMILARITY_PERCENT", 90, minimum=50, maximum=100
)
# How often Celery beat checks the deployment (the checks of manage.py doctor), for the overview.
DOCTOR_SECONDS = env_positive_float("DOCTOR_SECONDS", 600.0)
CELERY_BEAT_SCHEDULE = {
    "records-prune": {"task": "chat.tasks.records_prune_task", "schedule": 3600.0},
    "deployment-check": {"task": "chat.tasks.doctor_task", "schedule": DOCTOR_SECONDS},
    "short-term-memory-maintenance": {
        "task": "chat.tasks.short_term_memory_maintenance_task",
        "schedule": SHORT_TERM_MEMORY_MAINTENANCE_SECONDS,
    },
    "memory-extraction": {
        "task": "chat.tasks.memory_extraction_schedule_task",
        "schedule": MEMORY_EXTRACTION_SECONDS,
    },
    "memory-embedding": {"task": "chat.tasks.memory_embed_task", "schedule": MEMORY_EMBED_SECONDS},
}

# --- Discord and the model ----------------------------------------------------------------------

DISCORD_TOKEN = env_str("DISCORD_TOKEN")
DISCORD_API_BASE = env_url(
    "DISCORD_API_BASE", "https://discord.com/api/v10", schemes=("http", "https")
)
# Discord's global REST limit per bot token, shared by every worker through Redis; lower it when
# other programs use the same token, or leave pacing to a REST proxy (runbot --no-shared-limits).
DISCORD_REST_PER_SECOND = env_int("DISCORD_REST_PER_SECOND", 50, minimum=1, maximum=10_000)
DISCORD_GATEWAY_URL = env_str("DISCORD_GATEWAY_URL")
if DISCORD_GATEWAY_URL:
    DISCORD_GATEWAY_URL = env_url("DISCORD_GATEWAY_URL", "", schemes=("ws", "wss"))

LLM_BASE_URL = env_str("LLM_BASE_URL")
if LLM_BASE_URL:
    LLM_BASE_URL = env_url("LLM_BASE_URL", "", schemes=("http", "https"))
LLM_API_KEY = env_str("LLM_API_KEY")
LLM_MODEL = env_str("LLM_MODEL", "gpt-4o-mini")
LLM_PLANNER_MODEL = env_str("LLM_PLANNER_MODEL")
"""The planner's model in autonomous channels where the guild names none; empty: the main
persona's model."""
LLM_VISION_MODEL = env_str("LLM_VISION_MODEL")
LLM_VISION_BASE_URL = env_str("LLM_VISION_BASE_URL")
if LLM_VISION_BASE_URL:
    LLM_VISION_BASE_URL = env_url("LLM_VISION_BASE_URL", "", schemes=("http", "https"))
LLM_EMBEDDING_MODEL = env_str("LLM_EMBEDDING_MODEL")
if LLM_EMBEDDING_MODEL and any(c.isspace() for c in LLM_EMBEDDING_MODEL):
    raise ImproperlyConfigured(
        f"LLM_EMBEDDING_MODEL must be one model name, got {LLM_EMBEDDING_MODEL!r}"
    )
LLM_EMBEDDING_BASE_URL = env_str("LLM_EMBEDDING_BASE_URL")
if LLM_EMBEDDING_BASE_URL:
    LLM_EMBEDDING_BASE_URL = env_url("LLM_EMBEDDING_BASE_URL", "", schemes=("http", "https"))
    if not LLM_EMBEDDING_MODEL:
        raise ImproperlyConfigured(
            "LLM_EMBEDDING_BASE_URL is set but LLM_EMBEDDING_MODEL is empty: name the model "
            "the endpoint embeds with (or unset both for the offline default)"
        )
if LLM_EMBEDDING_MODEL and not (LLM_EMBEDDING_BASE_URL or LLM_BASE_URL):
    raise ImproperlyConfigured(
        "LLM_EMBEDDING_MODEL is set but neither LLM_EMBEDDING_BASE_URL nor LLM_BASE_URL is: "
        "set LLM_EMBEDDING_BASE_URL to the endpoint serving /embeddings"
    )
OFFLINE_EMBEDDING_MODEL = env_str("OFFLINE_EMBEDDING_MODEL", "minilm")
"""The offline embedding model when ``LLM_EMBEDDING_MODEL`` names none: ``minilm``
(all-MiniLM-L6-v2, the default) or ``wordllama`` (lighter on CPU, weaker on paraphrases)."""
if OFFLINE_EMBEDDING_MODEL not in ("minilm", "wordllama"):
    raise ImproperlyConfigured(
        f"OFFLINE_EMBEDDING_MODEL must be minilm or wordllama, got {OFFLINE_EMBEDDING_MODEL!r}"
    )
PLURALKIT_API_BASE = env_str("PLURALKIT_API_BASE")
if PLURALKIT_API_BASE:
    PLURALKIT_API_BASE = env_url("PLURALKIT_API_BASE", "", schemes=("http", "https"))
# The transcript and metadata service behind process_youtube_video (chat/llm/video_transcripts.py);
# empty: the tool is never offered.
YOUTUBE_TRANSCRIPT_URL = env_str("YOUTUBE_TRANSCRIPT_URL")
if YOUTUBE_TRANSCRIPT_URL:
    YOUTUBE_TRANSCRIPT_URL = env_url("YOUTUBE_TRANSCRIPT_URL", "", schemes=("http", "https"))
# The moderation service every reply piece is checked against before it reaches Discord
# (OpenAI's POST /moderations shape; chat/llm/moderation.py); empty: nothing is checked.
MODERATION_BASE_URL = env_str("MODERATION_BASE_URL")
if MODERATION_BASE_URL:
    MODERATION_BASE_URL = env_url("MODERATION_BASE_URL", "", schemes=("http", "https"))
MODERATION_API_KEY = env_str("MODERATION_API_KEY")
MODERATION_MODEL = env_str("MODERATION_MODEL") or "omni-moderation-latest"
MODERATION_ON_ERROR = env_choice("MODERATION_ON_ERROR", "withhold", choices=("withhold", "allow"))

# --- Metrics and health (docs/operations.md, "Monitoring") ------------------------------------
# runbot serves /metrics, /healthz and /readyz on WORKER_METRICS_PORT and the Celery worker its
# /metrics on CELERY_METRICS_PORT (unset: off; 0: a free port, logged); both listen on their
# host variable, the loopback interface unless told otherwise. The web process's /metrics
# answers operators (staff) and `Authorization: Bearer <METRICS_TOKEN>` (empty: operators only).
WORKER_METRICS_PORT = env_port("WORKER_METRICS_PORT")
WORKER_METRICS_HOST = env_str("WORKER_METRICS_HOST", "127.0.0.1")
CELERY_METRICS_PORT = env_port("CELERY_METRICS_PORT")
CELERY_METRICS_HOST = env_str("CELERY_METRICS_HOST", "127.0.0.1")
METRICS_TOKEN = env_str("METRICS_TOKEN")

# Persona tests (docs/persona-tests.md): the model that answers a case's rubric yes or no (empty:
# the persona's own model), and how many model calls one run has in flight at once.
JUDGE_MODEL = env_str("JUDGE_MODEL")
PERSONA_TEST_CONCURRENCY = env_int("PERSONA_TEST_CONCURRENCY", 8, minimum=1, maximum=64)

# --- Auth, i18n, static -----------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:index"
LOGOUT_REDIRECT_URL = "login"

# Log in with Discord (DESIGN §3b): django-allauth's Discord provider, offered on the login page
# when the application's OAuth2 credentials are set. Its URLs follow DISCORD_OAUTH_AUTHORIZE_URL
# and DISCORD_API_BASE, so the sandbox can stand in for Discord. People's rights per guild come
# from Discord (accounts/): at login, from the worker's gateway, and refreshed by Celery beat
# every DISCORD_RIGHTS_REFRESH_SECONDS with their stored token.
DISCORD_CLIENT_ID = env_str("DISCORD_CLIENT_ID")
DISCORD_CLIENT_SECRET = env_str("DISCORD_CLIENT_SECRET")
if bool(DISCORD_CLIENT_ID) != bool(DISCORD_CLIENT_SECRET):
    missing = "DISCORD_CLIENT_SECRET" if DISCORD_CLIENT_ID else "DISCORD_CLIENT_ID"
    raise ImproperlyConfigured(
        f"{missing} is empty: Log in with Discord needs both DISCORD_CLIENT_ID and "
        "DISCORD_CLIENT_SECRET (the application's OAuth2 credentials), or neither"
    )
DISCORD_LOGIN_ENABLED = bool(DISCORD_CLIENT_ID)
DISCORD_OAUTH_AUTHORIZE_URL = env_url(
    "DISCORD_OAUTH_AUTHORIZE_URL", "https://discord.com/oauth2/authorize", schemes=("http", "https")
)
DISCORD_RIGHTS_REFRESH_SECONDS = env_positive_float("DISCORD_RIGHTS_REFRESH_SECONDS", 30.0)
if DISCORD_RIGHTS_REFRESH_SECONDS > 30:
    raise ImproperlyConfigured(
        "DISCORD_RIGHTS_REFRESH_SECONDS must be at most 30: a right lost in Discord is lost on "
        f"the dashboard within 60 s (got {DISCORD_RIGHTS_REFRESH_SECONDS:g})"
    )
CELERY_BEAT_SCHEDULE["discord-rights-refresh"] = {
    "task": "accounts.tasks.guild_rights_refresh_task",
    "schedule": DISCORD_RIGHTS_REFRESH_SECONDS,
}
SOCIALACCOUNT_PROVIDERS = {
    "discord": {
        "provider_class": "accounts.adapter.DashboardDiscordProvider",
        "APPS": (
            [{"client_id": DISCORD_CLIENT_ID, "secret": DISCORD_CLIENT_SECRET}]
            if DISCORD_LOGIN_ENABLED
            else []
        ),
        "SCOPE": ["identify", "guilds"],
    }
}
SOCIALACCOUNT_ADAPTER = "accounts.adapter.DashboardSocialAdapter"
ACCOUNT_ADAPTER = "accounts.adapter.DashboardAccountAdapter"
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_EMAIL_REQUIRED = False
SOCIALACCOUNT_QUERY_EMAIL = False
SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_STORE_TOKENS = True
SOCIALACCOUNT_LOGIN_ON_GET = False
ACCOUNT_EMAIL_VERIFICATION = "none"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# WhiteNoise serves static files from the web process (daphne), straight from the finders, so
# no collectstatic step is needed before start.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# Uploaded files (persona avatars from character cards); served by Django in development only.
MEDIA_URL = "media/"
MEDIA_ROOT = VAR_DIR / "media"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
