#!/usr/bin/env python3
"""A JetStream stream for the bench's bus run, over the plain NATS protocol (no client
library needed): `nats.py create|count|delete HOST:PORT NAME`. `create` makes a file stream
capturing `NAME.>`; `count` prints how many messages it holds; `delete` removes it."""
import json
import socket
import sys


def request(address, subject, body):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        stream = sock.makefile("rb")
        stream.readline()  # INFO
        payload = json.dumps(body).encode() if body is not None else b""
        sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false}\r\n'
            b"SUB _INBOX.inlet_bench 1\r\n"
            + f"PUB {subject} _INBOX.inlet_bench {len(payload)}\r\n".encode()
            + payload
            + b"\r\n"
        )
        while True:
            line = stream.readline()
            if not line:
                raise SystemExit(f"NATS closed the connection before answering {subject}")
            if line.startswith(b"PING"):
                sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise SystemExit(f"NATS: {line.decode().strip()}")
            elif line.startswith(b"MSG"):
                size = int(line.split()[-1])
                answer = json.loads(stream.read(size + 2)[:size])
                if "error" in answer:
                    raise SystemExit(f"JetStream: {answer['error']}")
                return answer


def main():
    command, address, name = sys.argv[1:4]
    if command == "create":
        config = {"name": name, "subjects": [f"{name}.>"], "storage": "file"}
        request(address, f"$JS.API.STREAM.CREATE.{name}", config)
    elif command == "count":
        print(request(address, f"$JS.API.STREAM.INFO.{name}", None)["state"]["messages"])
    elif command == "delete":
        request(address, f"$JS.API.STREAM.DELETE.{name}", None)
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
