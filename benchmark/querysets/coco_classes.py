"""The 80 COCO object classes and the table that maps free-form GQA object names onto them.

HATIE (App. A) keeps only GQA objects whose name matches one of the 80 COCO classes, because the evaluation
segmenter is COCO-trained. GQA names are free-form ("man", "kitten", "laptop computer"), so matching is a table:
every COCO class name maps to itself, plus the synonyms below. Names that are ambiguous between classes or usually
denote something else ("glass" may be a window, "board" many things, "table" is COCO's "dining table" only when
it is one) are left out on purpose: a missed object only costs a candidate, a wrong class makes a wrong query.
"""

from __future__ import annotations

# COCO 2017 detection classes in category-id order (the names torchvision / detectron2 use).
COCO_CLASSES: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
    "hair drier", "toothbrush",
)

# GQA name -> COCO class, beyond the identity mapping. Lower-case; plural forms are listed where GQA uses them for
# a single object (GQA annotates "skis", "scissors", "glasses" as one object).
GQA_SYNONYMS: dict[str, str] = {
    # person
    "man": "person", "woman": "person", "boy": "person", "girl": "person", "child": "person", "kid": "person",
    "lady": "person", "guy": "person", "player": "person", "skier": "person", "surfer": "person",
    "skateboarder": "person", "snowboarder": "person", "batter": "person", "catcher": "person",
    "pitcher": "person", "umpire": "person", "tennis player": "person", "baby": "person", "people": "person",
    "rider": "person", "biker": "person", "gentleman": "person", "spectator": "person", "passenger": "person",
    "pedestrian": "person", "chef": "person", "cowboy": "person", "soldier": "person", "policeman": "person",
    "officer": "person", "driver": "person", "adult": "person", "toddler": "person", "young man": "person",
    "young woman": "person", "little girl": "person", "little boy": "person",
    # vehicles
    "bike": "bicycle", "motorbike": "motorcycle", "motor bike": "motorcycle", "scooter": "motorcycle",
    "plane": "airplane", "jet": "airplane", "aircraft": "airplane", "airliner": "airplane",
    "taxi": "car", "cab": "car", "suv": "car", "van": "car", "police car": "car", "sedan": "car",
    "double decker": "bus", "school bus": "bus", "locomotive": "train", "pickup truck": "truck",
    "pickup": "truck", "fire truck": "truck", "ship": "boat", "sailboat": "boat", "canoe": "boat",
    "kayak": "boat", "yacht": "boat",
    # street
    "stoplight": "traffic light", "traffic signal": "traffic light", "hydrant": "fire hydrant",
    "parking meters": "parking meter", "meter": "parking meter", "park bench": "bench",
    # animals
    "kitten": "cat", "kitty": "cat", "puppy": "dog", "pony": "horse", "lamb": "sheep", "calf": "cow",
    "bull": "cow", "cattle": "cow", "polar bear": "bear", "teddy": "teddy bear", "stuffed animal": "teddy bear",
    "stuffed bear": "teddy bear", "seagull": "bird", "pigeon": "bird", "duck": "bird", "goose": "bird",
    "parrot": "bird",
    # accessories
    "purse": "handbag", "bag": "handbag", "necktie": "tie", "luggage": "suitcase", "ski": "skis",
    "ball": "sports ball", "soccer ball": "sports ball", "tennis ball": "sports ball", "baseball": "sports ball",
    "football": "sports ball", "volleyball": "sports ball", "basketball": "sports ball", "bat": "baseball bat",
    "glove": "baseball glove", "mitt": "baseball glove", "baseball mitt": "baseball glove",
    "racket": "tennis racket", "racquet": "tennis racket", "tennis racquet": "tennis racket",
    "skate board": "skateboard", "surf board": "surfboard",
    # kitchen and food
    "wineglass": "wine glass", "mug": "cup", "coffee cup": "cup", "teacup": "cup", "doughnut": "donut",
    "hotdog": "hot dog", "sandwiches": "sandwich", "oranges": "orange", "bananas": "banana", "apples": "apple",
    "carrots": "carrot", "cupcake": "cake",
    # furniture and devices
    "sofa": "couch", "armchair": "chair", "houseplant": "potted plant", "plant pot": "potted plant",
    "flower pot": "potted plant", "flowerpot": "potted plant", "dining table": "dining table",
    "kitchen table": "dining table", "television": "tv", "tv screen": "tv", "monitor": "tv",
    "computer monitor": "tv", "laptop computer": "laptop", "computer mouse": "mouse", "remote control": "remote",
    "controller": "remote", "computer keyboard": "keyboard", "phone": "cell phone", "cellphone": "cell phone",
    "mobile phone": "cell phone", "smartphone": "cell phone", "fridge": "refrigerator", "books": "book",
    "hair dryer": "hair drier", "hairdryer": "hair drier",
}

_NAME_TO_CLASS: dict[str, str] = {c: c for c in COCO_CLASSES} | GQA_SYNONYMS


def to_coco_class(name: str) -> str | None:
    """The COCO class a GQA object name denotes, or None. Case and surrounding spaces are ignored."""
    return _NAME_TO_CLASS.get(" ".join(name.lower().split()))


def natural_name(key: str) -> str:
    """A class key as written in prose: underscores become spaces (EditVal keys read "stop_sign", "potted_plant")."""
    return key.replace("_", " ").strip()
