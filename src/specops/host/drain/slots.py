"""The drain's look at llama-server's /slots: how many slots are processing (the hold after an idle look)."""

from __future__ import annotations

import http.client
import json
import urllib.parse

from specops.host.hostlib import busy_slots


def look(url: str, headers: dict) -> tuple[int | None, int | None]:
    """(slots processing, None where /slots cannot be read; the local port of this look's connection, which the
    counts of client connections leave out)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=5)
    mine = None
    try:
        conn.connect()
        mine = conn.sock.getsockname()[1]
        conn.request("GET", parts.path.rstrip("/") + "/slots", headers={**headers, "Connection": "close"})
        resp = conn.getresponse()
        slots = json.loads(resp.read()) if resp.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None, mine
    finally:
        conn.close()
    return busy_slots(slots), mine
