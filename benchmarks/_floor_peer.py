"""The HTTP floor (a peer for serving_peers.py): the least an HTTP/1.1 server can do per request.

    python benchmarks/_floor_peer.py PORT

A raw `asyncio.Protocol` (on uvloop when it is installed, as `mlops serve` runs) that reads
each request's header block and `Content-Length` body on a keep-alive connection and answers
a fixed 200 with a 2-byte body: no parsing beyond finding the header end and the length, no
routing, no inference. What the client spends on it per request is what any HTTP server
costs that client for that body size.
"""

import asyncio
import sys

RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2\r\n\r\n{}")


class Floor(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buf, self.need = transport, bytearray(), None

    def data_received(self, data):
        self.buf += data
        while True:
            if self.need is None:  # in the header block
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                length = 0
                for line in bytes(self.buf[:end]).split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                self.need = end + 4 + length
            if len(self.buf) < self.need:
                return
            del self.buf[:self.need]
            self.need = None
            self.transport.write(RESPONSE)


async def main(port):
    server = await asyncio.get_running_loop().create_server(Floor, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        uvloop = None
    (uvloop.run if uvloop else asyncio.run)(main(int(sys.argv[1])))
