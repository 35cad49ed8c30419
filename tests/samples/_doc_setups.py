"""The fill-ins a docs block names with ``<!-- docs-test: setup=NAME -->``.

A block shows the lines about this package; what it leaves to the reader (their graph, their
executors, a running AutoGen runtime, an emulator) comes from here: the smallest honest
versions, put in the page's namespace before the block runs. Each fill-in is a function of that
namespace; :func:`close` releases what they opened when the page ends.
"""

import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_OPENED = "__docs_opened__"


def _opened(ns: dict[str, Any]) -> list[Any]:
    opened: list[Any] = ns.setdefault(_OPENED, [])
    return opened


def langgraph(ns: dict[str, Any]) -> None:
    """``builder`` (a one-node chat graph), ``inputs``, ``config`` and a ``conversation_id``."""
    from langgraph.graph import START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"you said: {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    ns.update(
        builder=builder,
        inputs={"messages": [("user", "hello")]},
        config={"configurable": {"thread_id": "support-42"}},
        conversation_id="conv-42",
    )


def chat_model(ns: dict[str, Any]) -> None:
    """``model`` (a fake chat model that always answers the same, tools or not) and ``tools``
    (one tool), for a prebuilt agent."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    class Model(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> "Model":
            return self

    @tool
    def clock() -> str:
        """The time of day."""
        return "noon"

    ns.update(model=Model(responses=[AIMessage("noted")]), tools=[clock])


def maf(ns: dict[str, Any]) -> None:
    """``WorkflowBuilder`` and two executors ``a`` -> ``b`` that pass a string along."""
    from agent_framework import Executor, WorkflowBuilder, WorkflowContext, handler
    from typing_extensions import Never

    class Upper(Executor):
        @handler
        async def run(self, text: str, ctx: WorkflowContext[str]) -> None:
            await ctx.send_message(text.upper())

    class Done(Executor):
        @handler
        async def run(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
            await ctx.yield_output(text)

    ns.update(WorkflowBuilder=WorkflowBuilder, a=Upper(id="a"), b=Done(id="b"))


async def autogen(ns: dict[str, Any]) -> None:
    """A started ``SingleThreadedAgentRuntime`` as ``runtime``."""
    from autogen_core import SingleThreadedAgentRuntime

    runtime = SingleThreadedAgentRuntime()
    runtime.start()
    _opened(ns).append(runtime)
    ns["runtime"] = runtime


async def autogen_counter(ns: dict[str, Any]) -> None:
    """A ``Counter`` agent class (the one of docs/autogen.md) and a started ``runtime``."""
    from collections.abc import Mapping

    from autogen_core import MessageContext, RoutedAgent, message_handler

    from foundry_checkpoint_autogen import DurableAgent

    @dataclass
    class Add:
        n: int

    class Counter(DurableAgent, RoutedAgent):
        def __init__(self) -> None:
            super().__init__("counts")
            self.count = 0

        @message_handler
        async def add(self, message: Add, ctx: MessageContext) -> int:
            self.count += message.n
            return self.count

        async def save_state(self) -> Mapping[str, Any]:
            return {"count": self.count}

        async def load_state(self, state: Mapping[str, Any]) -> None:
            self.count = state["count"]

    ns.update(Counter=Counter, Add=Add)
    await autogen(ns)


def emulator_graph(ns: dict[str, Any]) -> None:
    """A running ``emu`` and a ``graph`` whose checkpointer talks to it (hosted mode)."""
    from foundry_checkpoint import FoundryCheckpointer
    from foundry_checkpoint.emulator import FoundryEmulator

    langgraph(ns)
    emu = FoundryEmulator()
    emu.start()
    os.environ["FOUNDRY_HOSTING_ENVIRONMENT"] = "emulator"
    saver = FoundryCheckpointer(
        endpoint=emu.endpoint,
        credential=emu.credential(user="alice"),
        connection_verify=emu.ca_file,
    )
    _opened(ns).extend([saver, emu])
    ns.update(emu=emu, graph=ns["builder"].compile(checkpointer=saver))


def maf_hosting(ns: dict[str, Any]) -> None:
    """``Approver`` (asks a ``Question``) and ``Notify`` executors of an approval workflow."""
    from agent_framework import Executor, WorkflowContext, handler, response_handler
    from typing_extensions import Never

    @dataclass
    class Question:
        text: str

    class Approver(Executor):
        @handler
        async def ask(self, text: str, ctx: WorkflowContext[str]) -> None:
            await ctx.request_info(Question(text), str)

        @response_handler
        async def answered(
            self, question: Question, answer: str, ctx: WorkflowContext[str]
        ) -> None:
            await ctx.send_message(f"{question.text} -> {answer}")

    class Notify(Executor):
        @handler
        async def run(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
            await ctx.yield_output(text)

    ns.update(Approver=Approver, Notify=Notify, Question=Question)


def quickstart(ns: dict[str, Any]) -> None:
    """Run ``samples/quickstart.py``: the thread ``demo-thread`` exists afterwards."""
    subprocess.run([sys.executable, "samples/quickstart.py"], check=True, capture_output=True)


def sqlite_db(ns: dict[str, Any]) -> None:
    """``checkpoints.db``: a SqliteSaver database with one finished thread."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    langgraph(ns)
    with sqlite3.connect("checkpoints.db", check_same_thread=False) as conn:
        graph = ns["builder"].compile(checkpointer=SqliteSaver(conn))
        graph.invoke(ns["inputs"], ns["config"])


def my_agent(ns: dict[str, Any]) -> None:
    """``my_agent.py``: an agent process that reads its environment and exits."""
    Path("my_agent.py").write_text(
        "import os\nassert os.environ['FOUNDRY_PROJECT_ENDPOINT']\n", encoding="utf-8"
    )


async def close(ns: dict[str, Any]) -> None:
    """Release what the fill-ins opened, newest first."""
    for thing in reversed(ns.get(_OPENED, [])):
        if hasattr(thing, "stop_when_idle"):
            await thing.stop_when_idle()
        elif hasattr(thing, "close"):
            thing.close()
        else:
            thing.stop()


def forked_thread(ns: dict[str, Any]) -> None:
    """Thread ``f``: a run of ``a -> b``, an ``update_state`` fork from the checkpoint before
    ``a``, then a replay from the checkpoint before ``b``."""
    import operator
    from typing import Annotated, TypedDict

    from langgraph.graph import END, START, StateGraph

    from foundry_checkpoint import FoundryCheckpointer

    class Steps(TypedDict):
        steps: Annotated[list[str], operator.add]

    builder = StateGraph(Steps)
    builder.add_node("a", lambda state: {"steps": ["a"]})
    builder.add_node("b", lambda state: {"steps": ["b"]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    config: Any = {"configurable": {"thread_id": "f"}}
    with FoundryCheckpointer() as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"steps": []}, config)
        history = list(saver.list(config))  # newest first: b, a, start, input
        graph.update_state(history[2].config, {"steps": ["edited"]})
        graph.invoke(None, history[1].config)
