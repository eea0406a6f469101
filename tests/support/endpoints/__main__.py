"""``python -m tests.support.endpoints anthropic|openai|gemini``: serve the session script."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from tests.support.endpoints import ENDPOINTS, session_script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.endpoints", description=__doc__)
    parser.add_argument("vendor", choices=sorted(ENDPOINTS))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default="", help="the key clients must send (default: any)")
    parser.add_argument("--record", help="write the requests, replies and usage here on exit")
    args = parser.parse_args(argv)
    endpoint = ENDPOINTS[args.vendor](
        session_script(args.vendor), host=args.host, port=args.port, api_key=args.api_key
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with endpoint:
        print(endpoint.url, flush=True)
        done.wait()
    record = json.dumps(endpoint.record(), indent=1)
    if args.record:
        with open(args.record, "w", encoding="utf-8") as handle:
            handle.write(record + "\n")
    else:
        print(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
