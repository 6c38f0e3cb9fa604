"""The CRC-64-AVRO fingerprints of the bundled schemas (events, commands, the snapshot record),
by the sha256 of the schema file's text.

A fingerprint is a function of the text alone, so an entry here is the one fastavro would
compute; a schema without one (a new version, a schema from a registry) has its fingerprint
computed on first use. Kept because computing them (a Python loop over every byte of the
canonical form) was most of the time to open a world. ``tests/little/events/test_schemas.py``
checks every entry against fastavro and that every bundled schema has one, and prints the
entries to paste here when a schema is added.
"""

KNOWN_FINGERPRINTS: dict[str, str] = {
    "ff4040faf3d56ff74b7c752405d79e0aa4494d3cbcb8cc8efb9426624ed98658": "a4d5f1496b466a98",  # ArtifactCommitted/v1.avsc
    "816d7b451f92dd0f03fe55350debcbffd0bbaa7508b3f2467f4e0d5d07084c44": "f3faacfa3685c55f",  # DecisionRecorded/v1.avsc
    "5c2fd24a0f86e952f1df7402d22e74a59f4d4c679b06aa4df1418664a8947aa7": "967621a0aaf0e953",  # ParallelBranchScheduled/v1.avsc
    "ae2344d147b740408afce7666e85d0040cb96118e49d4c99fcdd8d8e181a70b7": "2157525710f10ae2",  # PatchMarked/v1.avsc
    "957d6c96fa82b9bb5b4abe50775b4d57f07e5b0cf22587afe2c6f738dabc9264": "bf9ca95095d4f62b",  # RunCancelled/v1.avsc
    "cc54e2a225f7750fbcae0f7113a552621720b154d3db255723a24c41a018c936": "016902e1fad49031",  # RunClaimed/v1.avsc
    "b9b8ea6e4890f17e5f367a0b6e7f191e44a2ac134d9caed25700dd7cbd2e0dde": "71b1bc816db7a2b3",  # RunCompleted/v1.avsc
    "8b2ba9dded2bd6ad6ae9f4eef353c77924fc972ab7731a51a2f278b87649916c": "49b7537cafbd05f2",  # RunFailed/v1.avsc
    "a8c3921ab1f2a42516eb324cea28a7a74a8a0e431f4990604944a4148b938975": "50353333d929cc3c",  # RunParked/v1.avsc
    "70df51164f39365328e080986d3d664f6bbdac085a5dc96036f945d65003f8b7": "0e3fedd738cdaf9d",  # RunStarted/v1.avsc
    "20a78694122b658ba9f073814a03670dacd5ff2d5c2ce0b17292390b12ee35e9": "da044ea063edad60",  # RunStarted/v2.avsc
    "c731fedf9f1e80f8e6dbc20e50113ee83cb5fd1ceea360efb9be9b45615226ec": "5447d788674bc4df",  # RunStarted/v3.avsc
    "3b8e970b340b43f138c261c31b448e2d9703461106582c69601b718b256f647f": "a1671c2f1fbc93e3",  # RunStarted/v4.avsc
    "36da68a99becf510cbe66142a8836f90a4b71290236eeb7169aa26309a58a9c8": "3ffdc2bac0dbc2a4",  # RunStarted/v5.avsc
    "62b95152b06acde8d6bf8ee5e8d3e1a4f256650ee49dff226a9c2ceb61b99a6b": "d14c61fa623d21f5",  # RunStarted/v6.avsc
    "5db13cfa782039cb3dff1063f965725569938e06561058ce69abe5ae8a18b8a9": "d9150a41d37e2aee",  # RunSuspended/v1.avsc
    "eee3620ff06710922c5ee8291bf255fd944345dbd23219b549227dca5ab5bf27": "0f5a8d9f80f7d1e6",  # SignalSent/v1.avsc
    "89ea253bfe2a465440c090cc9c789927efc921c3025a7737ee3b659121569429": "4c18c6ec934a8367",  # StepCompleted/v1.avsc
    "9f970d6495d74ebfd3a69cc9f285453be49bd8a27a7d8fdf80fecc1571dcf138": "06ad2c79f1688ef7",  # StepFailed/v1.avsc
    "37a650537fd861ff22fae5e29beebe91a94b7f4388f400628df95b30a1830c94": "a7f70362d955e1ac",  # StepStarted/v1.avsc
    "409d5bdda694f2f9f5a79bae7f5c27c6f4193e5cce19a2819622134ef5ae8bf6": "e01b9e102be8dbab",  # SubRunReserved/v1.avsc
    "1b81016294d216930fe3730ff6a58c9e6811e16a36dc1cf5fb0721e9d4b99bef": "1f1bee1747f89fa1",  # ValueRecorded/v1.avsc
    "c02b610dd5e4b807841e07842883432f75283eddbab2732dee860bfcc1cddbce": "3cb6de1bb1d6d884",  # ValueRecorded/v2.avsc
    "081b44dfe73461b5d868b0513527a5b32ca9bf0e6deda1d3215b6d190b7709b2": "c37b8fa715b04401",  # WaitEnded/v1.avsc
    "ea1f442b73f880fa6866e743b64dae255e14da5e5ae51abb356614a290170c30": "a47014334ff4c458",  # WaitStarted/v1.avsc
    "c920462d841bd1c4cb0d30f5405470b5f061012b29238b8f89ab6fe5e220a679": "4c51750840655823",  # agent.call.admitted/v1.avsc
    "f398b4b3e7d0c552858924db6d4457b83b42734c4d782048de23aecadda24d2f": "88336404a48880f5",  # agent.call.admitted/v2.avsc
    "aceed16ebc9e6d9049fcb67f87dff35491382c45a383b21838cb0bca6c110ef1": "33778a9489640f6e",  # agent.call.settled/v1.avsc
    "7e91f88a64ec2d9a25b9801ceefc901fe13ee619cb5bcd8db8beb459019ede23": "621d30bec004f5de",  # agent.call.settled/v2.avsc
    "854901e28b47c86495e8868556341539917eebbbaceb3d6c649d6b80b5f0f69a": "f8c2a2d95871cfc3",  # commands/CancelRun/v1.avsc
    "bf1a6e9de3cdbc4f43a677a1ba24744933b7cb198d817229ac35b59874f19c60": "c56343678e6d677f",  # commands/ResumeRun/v1.avsc
    "a46017871c467cb6b24fca2d2009048b6c22f2b5a8a8e2b3af894f7f5e9304ac": "4e576c24b95b0c03",  # commands/SignalRun/v1.avsc
    "76237445b74749d0838bff804f361736bc5a4ecd407db34e4c504845d737866f": "10ddb0f0bed8217f",  # commands/StartRun/v1.avsc
    "5e496cb2a744e33465bd2c83d740620b92491f8b1b1b74602e4bbba619a60bd9": "9a8fdfb6e9ffb530",  # commands/StartRun/v2.avsc
    "667600a6ff387aa466ddd1cb51b4bcf7798f975e285ec876b212adfdc9157176": "e9a45478d6405a7a",  # commands/StartRun/v3.avsc
    "a0b79a1744246e45f7a04b6107472b140dd6812e9bc006ba86a3bc81053d4f40": "4057b5cca32cf56a",  # harness.model.called/v1.avsc
    "b1d803f16a886146379554c7ac677a4c762865f0bf12e1b24be2f61a13d56c93": "1843dff45691e7b5",  # harness.model.failed/v1.avsc
    "a4cc523707abc59baca54f21b0f51a93b4b0a42810c217e91cdcc01ddd197944": "acf80bf0aab77241",  # harness.model.responded/v1.avsc
    "3705e404aa5161ad47b82cdaaaf99468ed010e2424d894b1c44eb4519efbbc84": "93940dde770053cd",  # harness.model.responded/v2.avsc
    "4ebda0febb12665640fbea681553e081b44d7edbb901760ef8130c7fbbcb2945": "5fca9e41a903974a",  # harness.session.compacted/v1.avsc
    "df064224c2d61143dde4e1489cfa648d4918c57c62fa44335f8fadda9e7bfb68": "28ef784643129e6f",  # harness.session.completed/v1.avsc
    "e49ea99477dfa8fd1e178a1dfd31384e42825fcc39a085f8f5888eb5cc1806b5": "936e23321b57c543",  # harness.session.completed/v2.avsc
    "4862f0c567b476cbcc2824d7dbab1f4b222701222202247da7ba5d7e406fbdaa": "054eb8ce664009f4",  # harness.session.started/v1.avsc
    "8d309a1e63a01ae47af0ac84ae3b242780ed5c7fff05d59a22e3c2e345f1fbcd": "9209e69c0e8aef3c",  # harness.session.started/v2.avsc
    "2ad0bcb4b5040ee0e1d91a4f16d98de064ca38b352fc5e639e09b8570837548b": "0ad23fb4c622aa68",  # harness.tool_call.failed/v1.avsc
    "54f9e4b139637d2914f86ac2e77488e1218739fdffbd0b8d880ed066e0b6ec1a": "dc6498762fb3019b",  # harness.tool_call.started/v1.avsc
    "20e249a545aa17487b4126bdddb0241f83698fe21754d02303781fc1b740ea50": "aa01bb1c4f279293",  # harness.tool_call.succeeded/v1.avsc
    "19f328c8e150f164e211bf32295441240271ed319d0d97d72542fed1223255fa": "5ecfe022327908fd",  # snapshots/RunSnapshot/v1.avsc
}
