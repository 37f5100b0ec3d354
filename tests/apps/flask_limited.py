"""Flask + Flask-Limiter on the shm:// storage: 50/day for everyone.

SHMWIN_DEDUCT=1 counts a request only after a 200 (``deduct_when``: each worker first
*tests* the limit, which a fresh worker must answer from shared memory).
"""

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
    headers_enabled=True,
)
deduct = os.environ.get("SHMWIN_DEDUCT") == "1"


@app.route("/")
@limiter.limit("50/day", deduct_when=(lambda response: response.status_code == 200) if deduct else None)
def index() -> str:
    return str(os.getpid())
