"""Deterministic synthetic memories: varied English sentences with some Chinese, like agents' notes."""

from __future__ import annotations

import random

_SUBJECTS = [
    "the API gateway", "the billing service", "the kanban board", "the nightly build", "the search index",
    "the auth middleware", "the payment worker", "the staging cluster", "the mobile client", "the data pipeline",
    "the cache layer", "the migration script", "the release branch", "the metrics exporter", "the scheduler",
    "the webhook handler", "the config loader", "the vector store", "the embedding job", "the CI runner",
    "the docs site", "the rate limiter", "the retry queue", "the feature flag service", "the backup task",
]
_VERBS = [
    "failed", "timed out", "was rewritten", "now retries", "was moved", "leaks memory", "must log",
    "should batch", "was pinned", "blocks", "needs a lock", "was upgraded", "drops requests", "was profiled",
    "must validate", "was split", "was rolled back", "now streams", "compacts", "caches",
]
_OBJECTS = [
    "every request", "large uploads", "the session tokens", "stale fragments", "duplicate events",
    "the JSON payloads", "its SQLite file", "the websocket stream", "cold starts", "expired keys",
    "the nightly exports", "unicode file names", "the retry budget", "slow queries", "the audit trail",
    "timestamps in milliseconds", "the health checks", "concurrent writers", "the schema metadata", "old versions",
]
_REASONS = [
    "after the last deploy", "because the disk filled up", "when the load doubled", "during the failover test",
    "since the library upgrade", "under high concurrency", "on the 2-core machine", "in the Docker image",
    "behind the proxy", "with the new tokenizer", "when the network flapped", "after a restart",
    "for the quarterly report", "to keep latency low", "to avoid lost writes", "so agents see the same data",
]
_CHINESE = [
    "{s}在部署後失敗了，原因是{r}。", "請記住：{s}必須用毫秒時間戳。", "{s}的延遲在高並發下上升到{n}毫秒。",
    "我們決定把{s}的批次大小改成{n}。", "{s}需要加鎖，否則會遺失寫入。", "備註：{s}每{n}分鐘壓縮一次。",
]
_CHINESE_SUBJECTS = ["搜尋索引", "向量資料庫", "看板", "快取層", "排程器", "計費服務", "嵌入模型", "備份任務"]
_CHINESE_REASONS = ["磁碟滿了", "網路不穩", "版本升級", "負載加倍", "設定錯誤"]
_TEMPLATES = [
    "{s} {v} {o} {r}.", "Note: {s} {v} {o}; seen {n} times {r}.", "Decision: {s} {v} {o} (ticket {n}).",
    "{s} {v} {r}, so we changed how it handles {o}.", "Remember that {s} {v} {o} — measured {n} ms {r}.",
    "Preference: keep {o} out of {s}; it {v} {r}.",
]


def sentence(rng: random.Random) -> str:
    """One memory-like sentence; about one in ten is Chinese."""
    n = rng.randint(2, 9999)
    if rng.random() < 0.1:
        template = rng.choice(_CHINESE)
        return template.format(s=rng.choice(_CHINESE_SUBJECTS), r=rng.choice(_CHINESE_REASONS), n=n)
    text = rng.choice(_TEMPLATES).format(
        s=rng.choice(_SUBJECTS), v=rng.choice(_VERBS), o=rng.choice(_OBJECTS), r=rng.choice(_REASONS), n=n
    )
    return text[0].upper() + text[1:]


def sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` distinct sentences, the same for the same seed (so cached vectors stay valid)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        text = sentence(rng)
        if text not in seen:  # identical texts tie exactly and would blur the recall@10-vs-exact check
            seen.add(text)
            out.append(text)
    return out


def queries(count: int, seed: int = 1_000_003) -> list[str]:
    """Short search phrases drawn from the same vocabulary as the memories."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        if rng.random() < 0.1:
            out.append(f"{rng.choice(_CHINESE_SUBJECTS)} {rng.choice(_CHINESE_REASONS)}")
        else:
            out.append(f"why {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}")
    return out
