"""Flask + Flask-Limiter on the shm:// storage: 50/day for everyone."""

import os

from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

import shmwin.integrations.limits  # noqa: F401  (registers shm://)

app = Flask(__name__)
limiter = Limiter(
    get_remote_address,
    app=app,
    storage_uri=f"shm://{os.environ['SHMWIN_TEST_NAME']}?capacity=100",
    strategy=os.environ["SHMWIN_STRATEGY"],
)


@app.route("/")
@limiter.limit("50/day")
def index() -> str:
    return str(os.getpid())
