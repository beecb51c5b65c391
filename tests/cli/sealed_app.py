"""The App of the payload-codec CLI tests: a greeting whose input and output are user data.
The codec comes from the command (``--payload-codec``) or, in the tests' own process, from
``with_payload_codec``."""

from __future__ import annotations

from streamflow import App, DurableContext

app = App()


@app.step
def shout(name: str) -> str:
    return name.upper()


@app.workflow(name="sealed.greet")
async def greet(ctx: DurableContext, name: str) -> str:
    loud = await ctx.step("shout", shout, name)
    return f"hello {name} ({loud})"
