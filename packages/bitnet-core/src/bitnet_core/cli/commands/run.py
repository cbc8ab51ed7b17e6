def register(sub):
    pass
