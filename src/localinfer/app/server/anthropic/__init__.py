"""The Anthropic dialect: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``, as llama-server serves
them, in Anthropic's shapes (the anthropic SDKs work against it)."""
