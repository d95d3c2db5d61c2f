"""The fleet page's question: search, filters, sort and page, and the answer over the rows a viewer may see.

The counts and the filter choices are computed from those rows only, so nothing of what the viewer may not see
(a tenant, a reason, an account, how many) reaches the page. Pure."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from stacks.console.rows import STATES, Row

SORTS = ("name", "tenant", "state", "reason", "account", "region", "group", "last")  # ?sort=; name: namespace/name
FILTERS = ("tenant", "state", "reason", "group", "account")  # ?tenant= ...: an exact value
MAX_SEARCH = 200


@dataclass(frozen=True)
class Query:
    search: str = ""  # words, each found in the name, namespace, tenant, reason, account, region or group
    filters: Mapping[str, str] = field(default_factory=dict)
    sort: str = "name"
    descending: bool = False
    page: int = 1

    @classmethod
    def of(cls, params: Mapping[str, str]) -> Query:
        """From a request's query string; anything unknown is ignored, a bad page or sort falls back."""
        sort = params.get("sort", "name")
        try:
            page = max(1, int(params.get("page", "1")))
        except ValueError:
            page = 1
        return cls(search=params.get("q", "")[:MAX_SEARCH].strip(),
                   filters={k: params[k] for k in FILTERS if params.get(k)},
                   sort=sort if sort in SORTS else "name", descending=params.get("order") == "desc", page=page)

    def matches(self, row: Row) -> bool:
        for name, wanted in self.filters.items():
            if getattr(row, name) != wanted:
                return False
        if self.search:
            text = " ".join((row.namespace, row.name, row.tenant, row.state, row.reason, row.account, row.region,
                             row.group)).lower()
            return all(word in text for word in self.search.lower().split())
        return True

    def params(self, **change: str | int) -> dict[str, str]:
        """This query as query-string parameters, with `change` applied (a link to another page or sort)."""
        out = {"q": self.search, **self.filters, "sort": self.sort, "order": "desc" if self.descending else "",
               "page": str(self.page)}
        out.update({k: str(v) for k, v in change.items()})
        return {k: v for k, v in out.items() if v and not (k == "page" and v == "1") and not (k == "sort" and v == "name")}


def _key(sort: str, row: Row) -> tuple:
    if sort == "last":
        return (row.last_time, row.key)
    if sort == "name":
        return (row.key,)
    return (getattr(row, sort), row.key)


@dataclass(frozen=True)
class Answer:
    rows: tuple[Row, ...]  # this page's
    matched: int  # rows matching the query
    total: int  # rows the viewer may see
    page: int
    pages: int
    counts: Mapping[str, int]  # by state, over the matching rows
    choices: Mapping[str, tuple[str, ...]]  # each filter's values among the viewer's rows


def answer(rows: Iterable[Row], query: Query, page_size: int) -> Answer:
    seen = list(rows)
    matched = [row for row in seen if query.matches(row)]
    matched.sort(key=lambda row: _key(query.sort, row), reverse=query.descending)
    pages = max(1, -(-len(matched) // page_size))
    page = min(query.page, pages)
    counts = Counter(row.state for row in matched)
    choices = {name: tuple(sorted({getattr(row, name) for row in seen if getattr(row, name)})) for name in FILTERS}
    return Answer(rows=tuple(matched[(page - 1) * page_size: page * page_size]), matched=len(matched),
                  total=len(seen), page=page, pages=pages,
                  counts={state: counts.get(state, 0) for state in STATES}, choices=choices)
