def distributed_patches():
    return []
