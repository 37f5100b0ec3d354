"""The attacker's keys against a cache placed by ``hash() & mask``: names tried in turn, kept
when their hash has its low bits 0. Pure (imports nothing), so that a ``python -c`` child of
``integration/core/test_keycache_flooding.py`` and ``benchmarks/bench_keyflood.py`` both search
in their own process: the hashes depend on that process's ``PYTHONHASHSEED``."""

KEY_CHARS = 24  # "client-" and 17 digits


def crafted_keys(count: int, bits: int) -> list[str]:
    """``count`` distinct keys of KEY_CHARS characters whose ``hash()`` has its low ``bits``
    bits 0 (a birthday search: about 2**bits names tried a key)."""
    mask = (1 << bits) - 1
    out: list[str] = []
    i = 0
    while len(out) < count:
        key = f"client-{i:017d}"
        if hash(key) & mask == 0:
            out.append(key)
        i += 1
    return out
