#!/usr/bin/env python3
"""A RabbitMQ queue for the bench's bus run, over plain AMQP 0-9-1 (no client library
needed): `amqp.py create|count|delete HOST:PORT NAME`, as guest/guest on vhost `/`.
`create` declares a durable queue NAME bound to `amq.topic` with the binding key `NAME.#`;
`count` prints how many messages it holds; `delete` removes it."""
import socket
import struct
import sys

FRAME_METHOD, FRAME_HEARTBEAT, FRAME_END = 1, 8, 0xCE
CONNECTION_START, CONNECTION_START_OK = (10, 10), (10, 11)
CONNECTION_TUNE, CONNECTION_TUNE_OK = (10, 30), (10, 31)
CONNECTION_OPEN, CONNECTION_OPEN_OK = (10, 40), (10, 41)
CONNECTION_CLOSE, CONNECTION_CLOSE_OK = (10, 50), (10, 51)
CHANNEL_OPEN, CHANNEL_OPEN_OK = (20, 10), (20, 11)
CHANNEL_CLOSE = (20, 40)
QUEUE_DECLARE, QUEUE_DECLARE_OK = (50, 10), (50, 11)
QUEUE_BIND, QUEUE_BIND_OK = (50, 20), (50, 21)
QUEUE_DELETE, QUEUE_DELETE_OK = (50, 40), (50, 41)


def shortstr(text):
    data = text.encode()
    if len(data) > 255:
        raise SystemExit(f"AMQP short strings hold at most 255 bytes: {text!r}")
    return struct.pack("B", len(data)) + data


def longstr(data):
    return struct.pack(">I", len(data)) + data


EMPTY_TABLE = longstr(b"")


class Connection:
    """One connection with channel 1 open; methods are sent and their answers awaited
    one at a time, which is all the bench needs."""

    def __init__(self, address, user="guest", password="guest", vhost="/"):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.stream = self.sock.makefile("rb")
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(0, CONNECTION_START)
        self.send(
            0,
            CONNECTION_START_OK,
            EMPTY_TABLE
            + shortstr("PLAIN")
            + longstr(f"\0{user}\0{password}".encode())
            + shortstr("en_US"),
        )
        tune = self.expect(0, CONNECTION_TUNE)
        channel_max, frame_max, _heartbeat = struct.unpack(">HIH", tune[:8])
        # Heartbeats off: the connection lives for one command.
        self.send(0, CONNECTION_TUNE_OK, struct.pack(">HIH", channel_max, frame_max, 0))
        self.send(0, CONNECTION_OPEN, shortstr(vhost) + shortstr("") + b"\x00")
        self.expect(0, CONNECTION_OPEN_OK)
        self.send(1, CHANNEL_OPEN, shortstr(""))
        self.expect(1, CHANNEL_OPEN_OK)

    def send(self, channel, method, arguments):
        payload = struct.pack(">HH", *method) + arguments
        frame = struct.pack(">BHI", FRAME_METHOD, channel, len(payload)) + payload
        self.sock.sendall(frame + bytes([FRAME_END]))

    def read_frame(self):
        header = self.stream.read(7)
        if len(header) < 7:
            raise SystemExit("RabbitMQ closed the connection")
        kind, channel, size = struct.unpack(">BHI", header)
        payload = self.stream.read(size + 1)
        if len(payload) < size + 1 or payload[-1] != FRAME_END:
            raise SystemExit("RabbitMQ sent a malformed frame")
        return kind, channel, payload[:-1]

    def expect(self, channel, method):
        """The arguments of the next method on `channel`, which must be `method`; a
        channel or connection close from the broker ends the program with its reason."""
        while True:
            kind, on, payload = self.read_frame()
            if kind == FRAME_HEARTBEAT:
                continue
            if kind != FRAME_METHOD:
                raise SystemExit(f"RabbitMQ: unexpected frame type {kind}")
            got = struct.unpack(">HH", payload[:4])
            arguments = payload[4:]
            if got in (CHANNEL_CLOSE, CONNECTION_CLOSE):
                code = struct.unpack(">H", arguments[:2])[0]
                text = arguments[3 : 3 + arguments[2]].decode(errors="replace")
                raise SystemExit(f"RabbitMQ: {code} {text}")
            if on != channel or got != method:
                raise SystemExit(f"RabbitMQ: expected method {method}, got {got} on {on}")
            return arguments

    def declare(self, queue, passive=False, durable=True):
        """queue.declare; returns the queue's message count."""
        bits = (1 if passive else 0) | (2 if durable else 0)
        self.send(
            1,
            QUEUE_DECLARE,
            struct.pack(">H", 0) + shortstr(queue) + struct.pack("B", bits) + EMPTY_TABLE,
        )
        answer = self.expect(1, QUEUE_DECLARE_OK)
        name_length = answer[0]
        return struct.unpack(">I", answer[1 + name_length : 5 + name_length])[0]

    def bind(self, queue, exchange, key):
        self.send(
            1,
            QUEUE_BIND,
            struct.pack(">H", 0)
            + shortstr(queue)
            + shortstr(exchange)
            + shortstr(key)
            + b"\x00"
            + EMPTY_TABLE,
        )
        self.expect(1, QUEUE_BIND_OK)

    def delete(self, queue):
        self.send(1, QUEUE_DELETE, struct.pack(">H", 0) + shortstr(queue) + b"\x00")
        self.expect(1, QUEUE_DELETE_OK)

    def close(self):
        self.send(0, CONNECTION_CLOSE, struct.pack(">H", 200) + shortstr("") + b"\0\0\0\0")
        self.expect(0, CONNECTION_CLOSE_OK)
        self.sock.close()


def main():
    command, address, name = sys.argv[1:4]
    connection = Connection(address)
    if command == "create":
        connection.declare(name)
        connection.bind(name, "amq.topic", f"{name}.#")
    elif command == "count":
        print(connection.declare(name, passive=True))
    elif command == "delete":
        connection.delete(name)
    else:
        raise SystemExit(f"unknown command {command}")
    connection.close()


if __name__ == "__main__":
    main()
