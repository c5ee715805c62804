import pytest
from django_rivet import workflows
from django_rivet.testing import run_until_idle

from story import workflows as story

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_pauses(monkeypatch):
    monkeypatch.setattr(story, "PAUSE", 0)


def test_the_button_starts_a_story_whose_page_follows_its_words(client):
    answer = client.post("/story/tell/")
    assert answer.status_code == 302
    workflow_id = answer["Location"].strip("/").rsplit("/", 1)[-1]
    page = client.get(answer["Location"])
    assert page.status_code == 200 and "workflowStream" in page.content.decode()
    handle = workflows.get(workflow_id)
    assert run_until_idle(handle) == "completed"
    # What the page reads (from the first word: a reload shows them all).
    assert list(handle.read_stream("words")) == story.TEXT.split()
