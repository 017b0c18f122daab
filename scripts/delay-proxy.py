#!/usr/bin/env python3
"""A TCP relay that delays every byte by a fixed time in each direction, for ssh's
ProxyCommand: `ssh -o ProxyCommand='python3 scripts/delay-proxy.py 25 127.0.0.1 %p' …` gives a
connection to 127.0.0.1 a 50 ms round trip, like a server across a country. Used by
scripts/bench-remote.sh to measure SFTP over a long link. Order is kept; bandwidth is not limited.

usage: delay-proxy.py ONE_WAY_MS HOST PORT   (talks on stdin/stdout)
"""
import os
import queue
import socket
import sys
import threading
import time


def pump(read, write, delay, done):
    q = queue.Queue()

    def reader():
        while True:
            try:
                data = read()
            except OSError:
                data = b""
            q.put((time.monotonic() + delay, data))
            if not data:
                return

    threading.Thread(target=reader, daemon=True).start()
    while True:
        due, data = q.get()
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if not data:
            done.set()
            return
        try:
            write(data)
        except OSError:
            done.set()
            return


def main():
    delay = float(sys.argv[1]) / 1000.0
    sock = socket.create_connection((sys.argv[2], int(sys.argv[3])))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    done = threading.Event()

    def to_server(data):
        sock.sendall(data)

    def to_client(data):
        view = memoryview(data)
        while view:
            n = os.write(1, view)
            view = view[n:]

    up = threading.Thread(target=pump, args=(lambda: os.read(0, 1 << 16), to_server, delay, done), daemon=True)
    down = threading.Thread(target=pump, args=(lambda: sock.recv(1 << 16), to_client, delay, done), daemon=True)
    up.start()
    down.start()
    done.wait()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


if __name__ == "__main__":
    main()
