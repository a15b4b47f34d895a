"""Lists and calls the tools of a package served by `hako serve`, with the official MCP Python SDK.

Usage:
    client.py stdio HANDSHAKE STORE_DIR PACKAGE HAKO_COMMAND...
    client.py streamable-http HANDSHAKE URL
    client.py sse HANDSHAKE URL

HANDSHAKE is `initialize` (the 2025-06-18 handshake) or `discover` (the stateless 2026-07-28
style with `server/discover` and `_meta` on every request). The script prints one JSON object on
stdout — the negotiated revision, the tool names, and the results of calling `greet` with
{"name": "Ada"} and with {} — and exits 0; any failure is a traceback and a nonzero exit. The
Rust test `tests/serve_mcp_clients.rs` runs it and checks what it printed.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def content_of(result):
    return {
        "text": [block.text for block in result.content if block.type == "text"],
        "structured": result.structured_content,
        "is_error": bool(result.is_error),
    }


async def exercise(read, write, handshake):
    async with ClientSession(read, write) as session:
        if handshake == "initialize":
            await session.initialize()
        elif handshake == "discover":
            await session.discover()
        else:
            raise SystemExit(f"unknown handshake {handshake!r}")
        tools = await session.list_tools()
        greeted = await session.call_tool("greet", {"name": "Ada"})
        refused = await session.call_tool("greet", {})
        return {
            "protocol_version": session.protocol_version,
            "tools": [tool.name for tool in tools.tools],
            "greeted": content_of(greeted),
            "refused": content_of(refused),
        }


async def main(argv):
    transport, handshake = argv[1], argv[2]
    if transport == "stdio":
        # The command that runs hako comes last and may be several words (a runner such as
        # qemu-aarch64 before a cross-built binary).
        store, package, command = argv[3], argv[4], argv[5:]
        params = StdioServerParameters(
            command=command[0],
            args=command[1:] + ["serve", "--store", store, "--stdio", package],
        )
        async with stdio_client(params) as (read, write):
            return await exercise(read, write, handshake)
    if transport == "streamable-http":
        async with streamable_http_client(argv[3]) as (read, write):
            return await exercise(read, write, handshake)
    if transport == "sse":
        async with sse_client(argv[3]) as (read, write):
            return await exercise(read, write, handshake)
    raise SystemExit(f"unknown transport {transport!r}")


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv))))
