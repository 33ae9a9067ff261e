"""Markdown output shared by the benchmark runners."""


def table(header, rows):
    """Prints a markdown table and a blank line."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
