import re

import pytest

pytestmark = pytest.mark.django_db


def test_the_home_page_links_to_every_part_and_each_part_answers(client):
    home = client.get("/")
    assert home.status_code == 200
    links = set(re.findall(r'href="(/[^"]*)"', home.content.decode()))
    assert {
        "/chat/acme/general/",
        "/orders/",
        "/digest/",
        "/counter/",
        "/story/",
        "/admin/",
    } <= links
    for link in links - {"/admin/"}:
        assert client.get(link).status_code == 200, link
    assert client.get("/admin/").status_code == 302  # to the login page
