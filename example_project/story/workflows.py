"""The ``story`` workflow: a long text streamed word by word, as it is "written".

Each word takes a step that thinks for a moment (a stand-in for an LLM
producing tokens), then ``ctx.write_stream`` appends it to the stream
``words``, which the story page follows over Server-Sent Events. Writes
from the workflow body land exactly once: kill the worker mid-way and the
workflow resumes on another run by replay, its readers see no word twice and
miss none. The steps make that replay fast: a word already thought of is
not thought of again.
"""

import time

from django_rivet.workflows import workflow

PAUSE = 0.15  # seconds a word takes

TEXT = """
Once upon a time a web framework learned to remember. Its actors kept their
state between requests, one call at a time, and its workflows wrote down
every step they took, so that a crash in the middle of the night cost them
nothing but a replay in the morning. People wanted to watch the work as it
happened: the rows of an import, the tokens of a model, the pages of a
report. So the workflows learned to speak while they worked. Each word they
wrote was given a number and kept, and a reader who lost the thread could
ask for everything after the last number it had seen. Nobody read a word
twice, nobody missed one, and when the work was done the stream said so and
fell silent. The end.
"""


def may_read(request, workflow_id, key):
    """Anyone may follow a story: it is a public demo (decide per user in yours)."""
    return workflow_id.startswith("story-") and key == "words"


@workflow(name="story", can_read_stream=may_read)
async def story(ctx, input):
    words = TEXT.split()
    for index, word in enumerate(words):
        await ctx.step(f"think-{index}", lambda: time.sleep(PAUSE))
        await ctx.write_stream("words", word)
    await ctx.close_stream("words")
    return len(words)
