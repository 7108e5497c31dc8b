"""The Ollama dialect: ``/api/*`` routes in Ollama's JSON shapes (see ``routes`` for what is served)."""
