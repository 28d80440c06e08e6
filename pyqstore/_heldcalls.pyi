# The extension of pyqstore/_heldcalls.c: the library's calls that run
# holding the GIL.  Private to pyqstore._casket.
from typing import Union

TOO_LONG: int

def install(address: int) -> None: ...
def get(handle: int, key: bytes) -> Union[bytes, int]: ...
