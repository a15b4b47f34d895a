#!/usr/bin/env python3
"""An HTTPS server on loopback for benches/serve/mixed.sh: `GET /delay/MS` answers 200 after MS
milliseconds, on HTTP/1.1 with keep-alive, every connection a task of one asyncio loop (a
thread per connection spent a fifth of each answer's time in the interpreter's lock), with a
certificate for `localhost` from a CA it makes with the openssl command (written to
DIR/ca.pem, for hako's policy). It prints its port on one line once it listens, and serves
until it is killed.

    benches/serve/slow_https.py DIR
"""
import asyncio
import os
import ssl
import subprocess
import sys


def make_certificates(folder):
    """A CA and a certificate for localhost signed by it, as PEM files in `folder`."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ca_key, ca, key, request, cert = (os.path.join(folder, name) for name in
                                      ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=hako bench CA", "-keyout", ca_key, "-out", ca)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-subj", "/CN=localhost", "-keyout", key, "-out", request)
    extensions = os.path.join(folder, "server.ext")
    with open(extensions, "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\n")
    openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-days", "1", "-extfile", extensions, "-out", cert)
    return cert, key


async def serve_connection(reader, writer):
    """Answers the requests of one connection in turn, keeping it open until the client closes."""
    try:
        while True:
            request = await reader.readline()
            if not request:
                return
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
            if length:
                await reader.readexactly(length)
            parts = request.split()
            path = parts[1].decode("latin-1").strip("/").split("/") if len(parts) > 1 else []
            if len(path) == 2 and path[0] == "delay" and path[1].isdigit():
                await asyncio.sleep(int(path[1]) / 1000)
                status, body = b"200 OK", b"waited\n"
            else:
                status, body = b"404 Not Found", b"no such route\n"
            writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain\r\n"
                         b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
        return
    finally:
        writer.close()


async def main():
    folder = sys.argv[1]
    cert, key = make_certificates(folder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = await asyncio.start_server(serve_connection, "127.0.0.1", 0, ssl=context,
                                        backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
