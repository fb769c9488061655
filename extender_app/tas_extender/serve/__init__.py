"""The HTTP edge: the extender's FastAPI app, the verbs answered in uvicorn's protocol callbacks,
and the deadlines on a request's head and body. May import decide; nothing else of tas_extender.
"""
