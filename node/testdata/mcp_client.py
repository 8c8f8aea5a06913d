"""Uses fusion's /mcp with the official Python MCP client (streamable HTTP).

Usage: mcp_client.py URL KEY CHAT_MODEL EMBED_MODEL. Prints one JSON object
for the Go test (node/mcpserver_test.go) to check.
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


def flatten(exc):
    """The messages of an exception and of every exception it groups."""
    if isinstance(exc, BaseExceptionGroup):
        return " | ".join(flatten(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


async def run(url, key, model, embed_model):
    out = {}
    headers = {"Authorization": f"Bearer {key}"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = await s.list_tools()
            out["tools"] = [t.name for t in tools.tools]
            r = await s.call_tool("list_models", {})
            out["models"] = [m["id"] for m in r.structuredContent["models"]]
            r = await s.call_tool("generate", {"model": model, "prompt": "Say hello.", "max_tokens": 8, "temperature": 0})
            assert not r.isError, r
            out["text"] = r.structuredContent["text"]
            r = await s.call_tool("embed", {"model": embed_model, "input": ["the cat sat"]})
            assert not r.isError, r
            out["embeddings"] = r.structuredContent["embeddings"]
            r = await s.call_tool("generate", {"model": "nope", "prompt": "x"})
            out["bad_model"] = r.content[0].text if r.isError else ""
    try:
        async with streamablehttp_client(url) as (read, write, _):
            async with ClientSession(read, write) as s:
                await s.initialize()
        out["no_key"] = "connected"
    except BaseException as e:  # the transport's HTTP error, in task groups
        out["no_key"] = flatten(e)
    return out


def main():
    url, key, model, embed_model = sys.argv[1:5]
    out = asyncio.run(asyncio.wait_for(run(url, key, model, embed_model), 60))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
