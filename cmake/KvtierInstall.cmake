# Installation and the exported kvtier::kvtier package (filled in below).
