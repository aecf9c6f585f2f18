"""SHA-256 checksums of the shared data files, pinned inside the package.

:func:`bo_ncgp.data.data_file` checks every file listed here against its checksum, wherever
the data root lies and whatever ``SHA256SUMS`` the root holds: a copy of the data cannot
change these values. Keys are paths relative to the data root (``/`` separated); the values
were computed with ``sha256sum`` from the files described in the shared data's README.

Example:
    >>> PINNED_SHA256["hotspots/civ_data.csv"][:12]
    '40aad15d19fb'
    >>> len(PINNED_SHA256)
    37
"""

from __future__ import annotations

__all__ = ["PINNED_SHA256"]

#: relative path -> SHA-256 hex digest of every shared data file the loaders read
PINNED_SHA256: dict[str, str] = {
    "dust/domain_subsample.dat": "823ebb02ed84915949384ace243c5911f8565652fe4fe684288f5361a814291a",
    "hotspots/civ_data.csv": "40aad15d19fb7079dcc786e466d490d6c030694bee50eca12f02c30fb422cf12",
    "mnist/t10k-images-idx3-ubyte.gz": (
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"
    ),
    "mnist/t10k-labels-idx1-ubyte.gz": (
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
    ),
    "streaming/banana_test_x.txt": (
        "74305b60ec7fce46789ffd175906dc5893f4720618973ebd83b3ef4b2e06d6e5"
    ),
    "streaming/banana_test_y.txt": (
        "48e9a7a309a75984ff5a409ae4cb7fbf5dc363a06efcbe2a3a145264ef4e5d9b"
    ),
    "streaming/banana_train_x.txt": (
        "f1d50b70028cc99ce658f16419357dc55b5c7ce97c1854493176e1728f4e69b8"
    ),
    "streaming/banana_train_y.txt": (
        "6cbb537327965075dd104ac6181eabd6aec374407d8a9e64661721aba0f4371d"
    ),
    "streaming/bank.csv": "09d1bf6be7ff324e3e32de113049bb788000d409b8116a334e44172c34eefd32",
    "streaming/invensense/1-loc.csv": (
        "10af3f5bc4ec1777018c5e6d88302f2d73920b40f9e335ba1071672cac598b67"
    ),
    "streaming/invensense/1-mag.csv": (
        "f6068d320ff4277b861a4572ce92bcf181c4e6087fea49ac68499b5974481c0a"
    ),
    "streaming/invensense/1-time.csv": (
        "17a291e0fdd1f4ed284ca90025982deff3ed1a630a614795f2cf8f3b668ae0d2"
    ),
    "streaming/invensense/2-loc.csv": (
        "3edc88dc5c16cffe01725aed2b4740689599a995239293594a39fd2999263909"
    ),
    "streaming/invensense/2-mag.csv": (
        "77c2c3d7b133699b6bd1cac2e10210c83c8f258cfeeb6681bd2ef1cc6f92fe7e"
    ),
    "streaming/invensense/2-time.csv": (
        "566362a68d0d5bbcfe07791f24532be2c32c3723e11bd0a301e204ef0f63f219"
    ),
    "streaming/invensense/3-loc.csv": (
        "5c05a115b8911e3e291b85a1dcb1ff0e753c0b92213a5cfa58e6e3f5ee8cfe11"
    ),
    "streaming/invensense/3-mag.csv": (
        "587450a86b5d0558bbb4e2e66fe153c03dd22b68bc45f01518d15049a0e4facb"
    ),
    "streaming/invensense/3-time.csv": (
        "061ee5a2d6a220b272e390631b739874dffbf64b4604fd777cb7a2270ad87458"
    ),
    "streaming/invensense/4-loc.csv": (
        "496cd49c36a45087f9443fe584dfc0d95e1339715a675f2a4113faa09fb831a5"
    ),
    "streaming/invensense/4-mag.csv": (
        "c6154bb5eb63ebcf989cc42dbc0076292d330dc1a5ed8e80bac21b1ff1488702"
    ),
    "streaming/invensense/4-time.csv": (
        "8282e3e1419ec55905e6d4eef9922ee72499f5f1ae941986cb89f0e79df033ee"
    ),
    "streaming/invensense/5-loc.csv": (
        "456bdbde6d9705897fba81878c613d4fef876e4c68e3be42eb09aff290526bb7"
    ),
    "streaming/invensense/5-mag.csv": (
        "e4b066a8c471aad9f5b0bf99a97d0799d1f36b80542e0ad951c8d9fae1d3615c"
    ),
    "streaming/invensense/5-time.csv": (
        "0e370e14f7ef612611abcd67ed65adedbb5cc9f66622b1a21451b97033730050"
    ),
    "streaming/invensense/6-loc.csv": (
        "b7889a7454f32d331d0116105452e97d9af7732bb581239ea2e3ba176f338878"
    ),
    "streaming/invensense/6-mag.csv": (
        "958adc6fb9311d0d8a027199a9b71fc7ef574111d333faa619132efeba042017"
    ),
    "streaming/invensense/6-time.csv": (
        "77f777a544c741ea57271c6bdde4983e42de8370b303b629975e17fb5d63fb69"
    ),
    "streaming/invensense/7-loc.csv": (
        "0242e7786e3bef6051f09a7597564768bbd78dd7b30ffe04152fa8187e20b509"
    ),
    "streaming/invensense/7-mag.csv": (
        "b061a7e5af0e63ad3b089ab964d0706acccd84e86a48966afa7cad05b0a2a811"
    ),
    "streaming/invensense/7-time.csv": (
        "ee2a7c98352715a7a0d84a0e54a8286695393bcc908e58d979bd21391f6085d0"
    ),
    "streaming/invensense/8-loc.csv": (
        "571da4fcc0455f63538b0525c46eb0c172b3c1fdf148db7794ac97068e95dc8f"
    ),
    "streaming/invensense/8-mag.csv": (
        "2feca2d9e80c36ea9ff03c7e43f60ca93ddde3f71a404f4f8e762c0da48e3a53"
    ),
    "streaming/invensense/8-time.csv": (
        "353694fa617ecbd818c174ec293665783bf6bc8aa1c787dbca69c58e1989bb39"
    ),
    "streaming/invensense/9-loc.csv": (
        "16b169366322651468da28008ab82201f959297f2f6af6b9b71e07299cba420d"
    ),
    "streaming/invensense/9-mag.csv": (
        "8e4fdc68f0be817526ed769e68bd4c59e63069ae279bc0de7cf672164e722ff1"
    ),
    "streaming/invensense/9-time.csv": (
        "1ea312a5d88dfdf35f26bf76d20096ba92f5f2f4e15830a29fa6073cf1799341"
    ),
    "streaming/mammographic.csv": (
        "5e697c75675bd40f6abfe2cf5a19f4006230c8d710c901b4f64b08bd9df123a3"
    ),
}
