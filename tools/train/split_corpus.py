"""Splits the npm corpus into train.txt and heldout.txt, by whole document.

Documents are visited in a fixed, sorted order; one is held out whenever the held-out share
of the bytes seen so far is under 5%, which spreads the held-out 5% of the bytes evenly over
the years and the book. No held-out text is ever seen in training. Documents are separated by the end-of-text token
string so the model learns where one address or chapter ends.
"""
import argparse
import pathlib

EOT = "<|endoftext|>"


def documents(npm: pathlib.Path):
    sotu = sorted((npm / "datasets-sotu/package/data").glob("*.txt"))
    moby = sorted((npm / "datasets-moby-dick/package/data").glob("*.txt"))
    moby = [p for p in moby if p.name != "contents.txt"]  # the table of contents is not prose
    for path in sotu + moby:
        text = path.read_text(encoding="utf-8").strip()
        if text:
            yield path.parent.parent.parent.name + "/" + path.name, text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--npm", type=pathlib.Path, required=True)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    args = ap.parse_args()
    train, held, held_names = [], [], []
    seen = held_bytes = 0
    for name, text in documents(args.npm):
        size = len(text.encode())
        seen += size
        if held_bytes < 0.05 * (seen - size):
            held_bytes += size
            held.append(text)
            held_names.append(name)
        else:
            train.append(text)
    (args.out / "train.txt").write_text(EOT.join(train), encoding="utf-8")
    (args.out / "heldout.txt").write_text("\n\n".join(held) + "\n", encoding="utf-8")
    (args.out / "heldout_documents.txt").write_text("\n".join(held_names) + "\n")
    tb = sum(len(t.encode()) for t in train)
    hb = sum(len(t.encode()) for t in held)
    print(f"split_corpus: {len(train)} training documents ({tb/1e6:.2f} MB), "
          f"{len(held)} held out ({hb/1e6:.2f} MB, {100*hb/(tb+hb):.1f}% of bytes)")


if __name__ == "__main__":
    main()
