"""The forges' APIs behind one interface (base.Forge): Gitea (gitea.py, tested against a real Gitea), GitLab
(gitlab.py) and GitHub (github.py), both written to their documented REST APIs and tested against recorded
responses. `forge_for(kind, api_url, token)` picks the implementation."""
