# Profiles every Python process started with WB_PROFILE_DIR set (children included); dumps at exit
# and at os._exit.
import os
if os.environ.get("WB_PROFILE_DIR"):
    import cProfile, sys, atexit
    _p = cProfile.Profile(); _p.enable()
    def _dump():
        _p.disable()
        _p.dump_stats(os.path.join(os.environ["WB_PROFILE_DIR"], f"{os.getpid()}.prof"))
    atexit.register(_dump)
    _exit = os._exit
    def _patched(code):
        try: _dump()
        finally: _exit(code)
    os._exit = _patched
