"""OpenAI's Responses API (``POST /v1/responses``): its wire models (``wire.py``), its answers and streamed events
(``reply.py``) and its routes (``routes.py``)."""
