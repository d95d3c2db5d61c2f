"""`python -m doubles [HISTORY]` serves a MockKubeAPI until stdin closes (it prints the URL first):
bench/ runs it in its own process so that its memory is not counted."""
import sys

from doubles.kube import MockKubeAPI


def main() -> None:
    with MockKubeAPI(history=int(sys.argv[1]) if len(sys.argv) > 1 else 4) as api:
        print(api.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
